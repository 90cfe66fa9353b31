#!/usr/bin/env python3
"""Start-to-ready time of Lambda function binaries (`make bench`).

For each binary: serve a stub Lambda Runtime API on a loopback port, start
the binary with AWS_LAMBDA_RUNTIME_API pointing at it, and time from the
spawn to its first `GET /2018-06-01/runtime/invocation/next` (the process
has read its configuration, built its SDK clients and is ready for an
event). The stub then holds that request; the process is stopped by its
PID. Prints min / median / max over RUNS runs (default 10) and the zipped
size of the binary as a Lambda `bootstrap`.

Usage: startup.py BINARY... (environment: RUNS)
"""
import http.server
import io
import os
import statistics
import subprocess
import sys
import threading
import time
import zipfile


def zipped_size(path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.write(path, "bootstrap")
    return len(buf.getvalue())


def time_to_ready(binary):
    ready = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            if self.path.endswith("/invocation/next"):
                ready.set()
                time.sleep(2)  # hold it: no event comes
            self.send_response(500)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    env = dict(
        os.environ,
        AWS_LAMBDA_RUNTIME_API=f"127.0.0.1:{server.server_address[1]}",
        AWS_LAMBDA_FUNCTION_NAME=os.path.basename(binary),
        AWS_LAMBDA_FUNCTION_VERSION="$LATEST",
        AWS_LAMBDA_FUNCTION_MEMORY_SIZE="256",
        AWS_REGION="us-east-1",
        AWS_ACCESS_KEY_ID="startup",
        AWS_SECRET_ACCESS_KEY="startup",
    )
    start = time.perf_counter()
    proc = subprocess.Popen([binary], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not ready.wait(10):
            raise SystemExit(f"{binary}: not ready within 10 s")
        return time.perf_counter() - start
    finally:
        proc.kill()  # the process this script started, by its PID
        proc.wait()
        server.shutdown()


def main():
    runs = int(os.environ.get("RUNS", "10"))
    for binary in sys.argv[1:]:
        times = sorted(time_to_ready(binary) * 1000 for _ in range(runs))
        print(
            f"  {os.path.basename(binary):<30} {os.path.getsize(binary) / 1e6:5.2f} MB, "
            f"zipped bootstrap {zipped_size(binary) / 1e6:5.2f} MB, start-to-ready "
            f"min {times[0]:.1f} / median {statistics.median(times):.1f} / max {times[-1]:.1f} ms ({runs} runs)"
        )


if __name__ == "__main__":
    main()
