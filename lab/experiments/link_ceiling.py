"""Issue 61, the 10 Gbit/s bar: does the emulated link carry 10 Gbit/s, and can the 1-core gloo ranks use it?

    nice -n 19 python lab/experiments/link_ceiling.py               # ~4 min on 2 cores; needs root
    nice -n 19 python lab/experiments/link_ceiling.py --quick       # smoke run

`bench comm`'s inter-host fit at 1 Gbit/s came within 0.91x of the link; at 10 Gbit/s it fell far
short. Two measurements say where the ceiling is:

- **the raw link**: one TCP stream (Python sockets, 4 MiB sends; and ``iperf3``, C, where it is
  installed) from one emulated host's network
  namespace to the other's, over the veth unshaped (no ``tc``) and shaped by ``tc`` to 10 Gbit/s
  (and 1 Gbit/s, the bar met), and over loopback in this namespace; the best and the median of
  ``--repeats`` transfers of ``--stream-mib`` each (receiver's clock, first byte to last);
- **the collectives**: `bench comm`'s worker (TorchRec's dist modules as DMP runs them:
  ``KJTAllToAll``, ``PooledEmbeddingsAllToAll``, DDP's bucketed all-reduce; 2 gloo ranks, one
  thread each) over the two namespaces with the veth **unshaped**, and over loopback, large
  messages only; each fitted as `bench comm` fits it (``comm_fit``: bytes a rank sends per call),
  so its bandwidth is the fastest these ranks move data through TorchRec with no link limit.

If the unshaped collectives stay far below 10 Gbit/s while the raw stream carries it, the bar is
out of reach on this host's CPU, not the link's. The namespaces are ``netns.EmulatedHosts``'s
(torn down on exit, an error included); "unshaped" is the same pair with no qdisc added.

Writes ``lab/results/communication/link_ceiling.json`` (small) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from cost_model.bench.netns import EmulatedHosts, LinkShape  # noqa: E402  (light: no torch)

PORT = 29611
COLLECTIVES = ("all_reduce", "all_to_all", "input_dist")
SIZES = (1 << 20, 4 << 20, 16 << 20, 64 << 20)  # bytes a rank holds: large, where bandwidth shows
CHUNK = 4 << 20


class UnshapedHosts(EmulatedHosts):
    """``EmulatedHosts`` with no qdisc on the veth: the link at the kernel's own speed."""

    def _shape(self, name: str) -> None:
        return None


# --- one TCP stream ---------------------------------------------------------------------------


def serve(port: int, total: int) -> None:
    """Receive ``total`` bytes on ``port``; print the seconds from first byte to last."""
    with socket.socket() as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(("0.0.0.0", port))
        server.listen(1)
        conn, _ = server.accept()
        with conn:
            buffer = bytearray(CHUNK)
            view = memoryview(buffer)
            got = conn.recv_into(view)
            start = time.perf_counter()
            while got < total:
                n = conn.recv_into(view)
                if n == 0:
                    break
                got += n
            print(json.dumps({"bytes": got, "seconds": time.perf_counter() - start}), flush=True)


def send(address: str, port: int, total: int) -> None:
    """Send ``total`` bytes to ``address:port`` in ``CHUNK``-byte sends (once it listens)."""
    payload = bytes(CHUNK)
    for _ in range(200):
        try:
            conn = socket.create_connection((address, port), timeout=60)
            break
        except ConnectionRefusedError:
            time.sleep(0.05)
    else:
        raise SystemExit(f"{address}:{port} never listened")
    with conn:
        sent = 0
        while sent < total:
            conn.sendall(payload)
            sent += CHUNK


def _self(*args: str) -> list[str]:
    return [sys.executable, str(Path(__file__).resolve()), *args]


def stream_gbit(total: int, receiver: list[str], sender: list[str], address: str) -> float:
    """One transfer of ``total`` bytes (``receiver``/``sender``: command prefixes, e.g. ``ip netns
    exec NS``); Gbit/s on the receiver's clock."""
    server = subprocess.Popen([*receiver, *_self("--serve", str(PORT), str(total))], stdout=subprocess.PIPE, text=True)
    try:
        subprocess.run([*sender, *_self("--send", address, str(PORT), str(total))], check=True, timeout=120)
        out, _ = server.communicate(timeout=120)
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    done = json.loads(out.strip().splitlines()[-1])
    return done["bytes"] * 8 / done["seconds"] / 1e9


def iperf3_gbit(receiver: list[str], sender: list[str], address: str, seconds: float) -> float | None:
    """One ``iperf3`` TCP stream of ``seconds`` (C, no Python in the path); None without iperf3."""
    if shutil.which("iperf3") is None:
        return None
    port = str(PORT + 1)
    server = subprocess.Popen(
        [*receiver, "iperf3", "-s", "-1", "-p", port, "--forceflush"], stdout=subprocess.PIPE, text=True
    )
    try:
        for line in server.stdout or ():  # wait until it listens
            if "listening" in line:
                break
        for _ in range(20):
            client = subprocess.run(
                [*sender, "iperf3", "-c", address, "-p", port, "-t", f"{seconds:g}", "-J"],
                capture_output=True,
                text=True,
                check=False,
            )
            if client.returncode == 0:
                break
            time.sleep(0.2)
        server.wait(timeout=30)
    except subprocess.TimeoutExpired:
        return None
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    if client.returncode != 0:
        return None
    return float(json.loads(client.stdout)["end"]["sum_received"]["bits_per_second"]) / 1e9


def streams(label: str, hosts: EmulatedHosts | None, total: int, repeats: int) -> dict:
    if hosts is None:
        receiver = sender = []
        address = "127.0.0.1"
    else:
        receiver, sender = hosts.command(1, []), hosts.command(0, [])
        address = hosts.address(1)
    rates = [stream_gbit(total, receiver, sender, address) for _ in range(repeats)]
    iperf = [r for r in (iperf3_gbit(receiver, sender, address, 2.0) for _ in range(repeats)) if r is not None]
    return {
        "link": label,
        "python_sockets": {
            "mib_a_transfer": total >> 20,
            "gbit_s": [round(r, 2) for r in rates],
            "best_gbit_s": round(max(rates), 2),
            "median_gbit_s": round(statistics.median(rates), 2),
        },
        "iperf3_2s": {
            "gbit_s": [round(r, 2) for r in iperf],
            "best_gbit_s": round(max(iperf), 2) if iperf else None,
            "median_gbit_s": round(statistics.median(iperf), 2) if iperf else None,
        },
    }


# --- the collectives -----------------------------------------------------------------------------


def collectives(label: str, hosts: EmulatedHosts | None, sizes: list[int], repeats: int) -> dict:
    """`bench comm`'s worker over ``hosts`` (None: loopback), fitted per collective; a failed
    launch (a gloo rank can abort on a loaded machine) is run once more, as `bench comm` does."""
    from autoshard.core.errors import MeasurementError

    try:
        return _collectives(label, hosts, sizes, repeats)
    except MeasurementError:
        return _collectives(label, hosts, sizes, repeats)


def _collectives(label: str, hosts: EmulatedHosts | None, sizes: list[int], repeats: int) -> dict:
    from autoshard.core.collectives import Collective, Tier
    from cost_model.bench import communication as bench
    from cost_model.bench.comm_fit import fit_collective

    args = ["--sizes", ",".join(map(str, sizes)), "--repeats", str(repeats), "--collectives", ",".join(COLLECTIVES)]
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "points.json"
        if hosts is None:
            argv = bench._worker_argv(1, 0, 2, "127.0.0.1", bench._free_port(), [*args, "--out", str(out)])
            bench._wait([bench._start(argv, bench._env("cpu", "lo"), Path(tmp) / "lo.log")])
        else:
            launches = []
            for host in range(2):
                where = out if host == 0 else Path(tmp) / "h1.json"
                argv = bench._worker_argv(2, host, 1, hosts.address(0), 29500, [*args, "--out", str(where)])
                log = Path(tmp) / f"h{host}.log"
                launches.append(bench._start(hosts.command(host, argv), bench._env("cpu", "aslink"), log))
            try:
                bench._wait(launches)
            except Exception:
                for _, log in launches:
                    print(f"--- {log.name}", *log.read_text().splitlines()[-25:], sep="\n", file=sys.stderr)
                raise
        raw = json.loads(out.read_text())
    fits = {}
    for name, points in raw["points"].items():
        fit = fit_collective(Collective(name), Tier.INTER, points, raw["world_size"], label)
        fits[name] = {
            "bandwidth_gbit_s": round(fit.bandwidth_gbps * 8, 3),
            "latency_ms": fit.latency_ms,
            "points_bytes_sent_ms_per_call": [list(p) for p in fit.points],
        }
    return {"link": label, "fits": fits}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--stream-mib", type=int, default=2048)
    parser.add_argument("--out", type=Path, default=ROOT / "lab" / "results" / "communication" / "link_ceiling.json")
    args = parser.parse_args()
    total = (256 if args.quick else args.stream_mib) << 20
    repeats = 1 if args.quick else args.repeats
    sizes = list(SIZES[:2] if args.quick else SIZES)
    load = [round(x, 2) for x in os.getloadavg()]
    started = datetime.now(UTC).isoformat(timespec="seconds")
    raw_link, through_torchrec = [], []
    raw_link.append(streams("loopback", None, total, repeats))
    with UnshapedHosts(LinkShape()) as hosts:
        raw_link.append(streams("2 namespaces, veth unshaped", hosts, total, repeats))
        through_torchrec.append(collectives("2 namespaces, veth unshaped", hosts, sizes, 5))
    for rate in (10.0, 1.0):
        shape = LinkShape(rate)
        with EmulatedHosts(shape) as hosts:
            small = total if rate >= 10 else total // 8  # 1 Gbit/s: 256 MiB, ~2 s
            raw_link.append(streams(f"2 namespaces, {shape.describe()}", hosts, small, repeats))
    through_torchrec.append(collectives("loopback", None, sizes, 5))
    report = {
        "command": " ".join(["python", "lab/experiments/link_ceiling.py", *sys.argv[1:]]),
        "started": started,
        "finished": datetime.now(UTC).isoformat(timespec="seconds"),
        "load_1_5_15_at_start": load,
        "load_1_5_15_at_end": [round(x, 2) for x in os.getloadavg()],
        "cores": os.cpu_count(),
        "note": "2 shared cores; a long measurement job holds one at nice 0; this ran at nice 19",
        "raw_tcp_stream": raw_link,
        "torchrec_dist_modules_2_gloo_ranks_1_thread": through_torchrec,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--serve":
        serve(int(sys.argv[2]), int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "--send":
        send(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
