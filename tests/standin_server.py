"""A stand-in for the vLLM API server, for process-lifecycle tests only.

Modes: ready (serves /health after --delay s, with a child process in its group, like vLLM's
engine core), solo (ready, without the child), crash (prints an error and exits 1), hang (never
answers), ignore-term (ready, but ignores SIGTERM so that only SIGKILL stops it), busy-port
(exits like a server that lost the race for its port).
"""

import argparse
import http.server
import multiprocessing
import signal
import sys
import time


def child() -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # like an engine core that outlives its parent
    while True:
        time.sleep(1)


class Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()

    def log_message(self, *args):
        pass


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", default="ready")
    parser.add_argument("--delay", type=float, default=0.5)
    args = parser.parse_args()
    print(f"stand-in server starting in mode {args.mode}", flush=True)
    if args.mode == "crash":
        print("ValueError: unrecognized argument --bogus", flush=True)
        return 1
    if args.mode == "busy-port":
        print("OSError: [Errno 98] Address already in use", flush=True)
        return 1
    if args.mode == "ignore-term":
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if args.mode != "solo":
        multiprocessing.get_context("fork").Process(target=child, daemon=False).start()
    if args.mode == "hang":
        while True:
            time.sleep(1)
    time.sleep(args.delay)
    http.server.HTTPServer(("127.0.0.1", args.port), Health).serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
