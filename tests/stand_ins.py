"""Stand-ins for a vLLM server and vLLM's load generator, for tests of the measuring logic
(sessions, groups): they log what they were asked; the real ones run in the end-to-end and
fault tests."""

import threading
import time

from sdbench.measure import loadgen, server


class Stand:
    """Stand-in vLLM servers and load generator; `events` says what happened, in order.
    `kill_at`: raise KeyboardInterrupt at that point (Ctrl-C / SIGTERM); `fail`: (workload,
    status) makes that workload's points invalid ("invalid") or kills the server ("failed");
    `throughput`: "<speculator> k=<k>" or speculator -> the output throughput its server's
    points measure (10 else), or a function of the point's concurrency that gives it; `tpot`:
    the same for the mean TPOT (ms) they report (none else), a function of the point's request
    rate (0 at a closed-loop point)."""

    def __init__(self, kill_at=None, fail=None, throughput=None, tpot=None):
        self.events, self.kill_at, self.fail = [], kill_at, fail or {}
        self.points = 0
        self.throughput, self.ports, self.tpot = throughput or {}, {}, tpot or {}

    def server(self, cell, config, server_log, env=None, verdict=None):
        stand, name = self, (cell.speculator, cell.server_config["target"]["name"])
        port = len(self.ports) + 1
        self.ports[port] = (cell.speculator, cell.label.split(" | ")[0])

        class Server:
            command, connect_host = ["stand-in"], "127.0.0.1"
            startup_s = started_at = None
            up = False

            def __init__(self):
                self.port = port

            def launch(self):
                stand.events.append(("launch", name))
                self.up, self.started_at = True, time.time()

            def start(self):
                stand.events.append(("up", name))
                self.startup_s = 1.5

            def alive(self):
                return self.up

            def stop(self):
                if self.up:
                    stand.events.append(("stop", name))
                self.up = False

        made = Server()
        self.last = made
        return made

    def run_point(self, argv, log=None, debug=False):
        args = {flag: value for flag, value in zip(argv, [*argv[1:], ""], strict=True)
                if flag.startswith("--") and not value.startswith("--")}
        self.points += 1
        if self.points == self.kill_at:
            raise KeyboardInterrupt
        workload = args["--dataset-path"]
        n = int(args["--num-prompts"])
        self.events.append(("point", workload, int(args["--seed"]),
                            int(args["--num-warmups"]), int(args["--ready-check-timeout-sec"]),
                            int(args.get("--max-concurrency", 0)), n))
        failed = 0
        for path, status in self.fail.items():
            if path in workload and status == "invalid":
                failed = n // 2
            if path in workload and status == "failed":
                self.last.up = False
                raise RuntimeError("server gone")
        speculator, setting = self.ports.get(int(args.get("--port", 0)), (None, None))
        throughput = self.throughput.get(setting, self.throughput.get(speculator, 10.0))
        if callable(throughput):
            throughput = throughput(int(args.get("--max-concurrency", 0)))
        tpot = self.tpot.get(setting, self.tpot.get(speculator))
        if callable(tpot):
            rate = args.get("--request-rate", "inf")
            tpot = tpot(0.0 if rate == "inf" else float(rate))
        if tpot is not None:
            tpot = {"mean_tpot_ms": float(tpot)}
        return {**(tpot or {}), "completed": n - failed, "failed": failed, "duration": 1.0,
                "output_throughput": throughput,
                "total_token_throughput": 20.0,
                "total_output_tokens": 8 * n, "input_lens": [4] * n, "output_lens": [8] * n,
                "ttfts": [0.1] * n, "itls": [[0.01] * 7] * n, "start_times": [0.0] * n,
                "generated_texts": ["x"] * n, "errors": [""] * failed + [""] * (n - failed)}

    def point_events(self):
        return [e for e in self.events if e[0] == "point"]


def _no_import() -> threading.Thread:
    """The load generator's background import, done: nothing to import here."""
    thread = threading.Thread(target=lambda: None)
    thread.start()
    return thread


def use(stand, monkeypatch):
    monkeypatch.setattr(server, "cell_server", stand.server)
    monkeypatch.setattr(loadgen, "run_point", stand.run_point)
    monkeypatch.setattr(loadgen, "preload", _no_import)
