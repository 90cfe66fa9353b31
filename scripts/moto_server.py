"""moto server (DynamoDB + Streams) serving one request at a time.

`moto_server` runs werkzeug with threaded=True, and moto's DynamoDB backend
does not lock around conditional writes, so two concurrent conditional
updates of one item can both succeed (a lost update real DynamoDB never
allows). Serving requests one at a time restores DynamoDB's per-item
atomicity, which the engine's exactly-once rules rely on.

Usage: python scripts/moto_server.py HOST PORT
"""

import os
import sys

from werkzeug.serving import run_simple

from moto.moto_server.werkzeug_app import (
    DomainDispatcherApplication,
    MotoRequestHandler,
    create_backend_app,
)


def main() -> None:
    host, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("MOTO_PORT", str(port))
    app = DomainDispatcherApplication(create_backend_app)
    run_simple(host, port, app, threaded=False, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
