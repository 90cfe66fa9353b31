"""Run the decider under AWS's Lambda runtime interface client for Python
(awslambdaric), against a Runtime API served here (the Lambda Runtime API's
`invocation/next` and `invocation/{id}/response` routes, as AWS documents
them), and check that it answers each recorded request as the Rust decider
did. `cargo lambda watch` cannot serve it on the local stack: its Invoke API
refuses functions that are not binaries of the Cargo project.

    python serve_under_ric.py   # needs awslambdaric (scripts/venv.sh)
"""

import http.server
import json
import os
import subprocess
import sys
import threading

from test_decider import RECORDED, canonical

with open(RECORDED) as f:
    PAIRS = json.load(f)
ANSWERS = {}
DONE = threading.Event()


class RuntimeApi(http.server.BaseHTTPRequestHandler):
    """The two routes a runtime client polls and answers on."""

    protocol_version = "HTTP/1.1"
    next_index = 0

    def log_message(self, fmt, *args):
        if os.environ.get('RIC_DEBUG'):
            sys.stderr.write(fmt % args + '\n')

    def do_GET(self):
        if not self.path.endswith("/runtime/invocation/next"):
            self.send_error(404)
            return
        i = RuntimeApi.next_index
        if i >= len(PAIRS):
            DONE.wait()  # no more invocations: hold the poll until the end
            self.close_connection = True
            return
        RuntimeApi.next_index += 1
        body = json.dumps(PAIRS[i]["request"]).encode()
        headers = {
            "Lambda-Runtime-Aws-Request-Id": f"req-{i}",
            "Lambda-Runtime-Deadline-Ms": "4102444800000",
            "Lambda-Runtime-Invoked-Function-Arn":
                "arn:aws:lambda:us-east-1:000000000000:function:python-decider",
            "Lambda-Runtime-Trace-Id": "Root=1-00000000-000000000000000000000000",
            "Content-Type": "application/json",
            "Content-Length": str(len(body)),
        }
        # Written raw: the runtime client (aws-lambda-cpp over libcurl)
        # gets no response from http.server's send_response framing.
        head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        self.wfile.write(head.encode() + b"\r\n" + body)
        self.wfile.flush()

    def do_POST(self):
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        parts = self.path.split("/")
        request_id = parts[-2]
        ANSWERS[request_id] = (parts[-1], json.loads(body) if body else None)
        self.send_response(202)
        self.send_header("Content-Length", "0")
        self.end_headers()
        if len(ANSWERS) == len(PAIRS):
            DONE.set()


def main():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), RuntimeApi)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(os.environ, AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{server.server_address[1]}",
               AWS_LAMBDA_FUNCTION_NAME="python-decider")
    here = os.path.dirname(os.path.abspath(__file__))
    client = subprocess.Popen([sys.executable, "-m", "awslambdaric", "decider.handler"],
                              cwd=here, env=env)
    try:
        if not DONE.wait(60):
            sys.exit(f"awslambdaric answered {len(ANSWERS)} of {len(PAIRS)} requests in 60 s")
    finally:
        client.kill()
        server.shutdown()
    for i, pair in enumerate(PAIRS):
        route, answer = ANSWERS[f"req-{i}"]
        assert route == "response", (i, route, answer)
        assert canonical(answer) == canonical(pair["answer"]), (i, answer, pair["answer"])
    print(f"served by awslambdaric: {len(PAIRS)} recorded requests answered as the Rust decider answered them")


if __name__ == "__main__":
    main()
