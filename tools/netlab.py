"""Several "hosts" on one machine: network namespaces joined by a shaped link.

    with Lab(hosts=2, rate="1gbit") as lab:
        proc = lab.msrun(0, nworkers=2, port=lab.free_port(), log_dir=..., script=..., args=[...])
        # msrun runs `script` as a file, with the repository root on PYTHONPATH
        lab.counters(0)            # {"tx_bytes": ..., "rx_bytes": ...} of host 0's interface
        lab.set_link(1, up=False)  # a link outage of host 1

Topology: 2 hosts are one veth pair (host 0's end in namespace h0, host 1's
in h1); more hosts each get a veth into a Linux bridge in a separate "switch"
namespace.  Every egress of the link is shaped with tbf (host side and, with a
bridge, switch side too), so each direction of each host's link carries at
most `rate`; `delay` > 0 adds a netem qdisc (root) with the tbf as its child.
The /24 and every name carry a random tag of this run (namespaces
``nl<tag>h<i>`` / ``nl<tag>sw``, interfaces ``nl<tag>h<i>`` / ``nl<tag>s<i>`` /
``nl<tag>br``, all <= 15 characters), so two runs never collide.

The hosts share the machine's cores unless ``cores="split"`` (``--cores split``) gives each
host's processes a share of their own, so that one host's threads never wait on a core
another host's hold, as on separate machines.

Clean-up runs on every exit path: `Lab.close()` (the context manager),
SIGINT/SIGTERM handlers (they clean up, then defer to the previous handler)
and atexit.  It kills every process inside the lab's namespaces (msrun puts
its workers in sessions of their own, so killing msrun's process group alone
would leave them running and the namespaces alive), then deletes the
namespaces, which removes their veths and the bridge.

Anything the kernel or iproute2 refuses raises `NetlabError` with the command
and its stderr; the tools turn it into exit code 2.

``python -m tools.netlab [--hosts N] [--rate R] [--delay D] [--mbytes M]``
builds a lab, streams M MB over TCP from the last host to host 0, prints the
throughput, the interface counters and ``tc -s qdisc``, and tears down.
"""
import argparse
import atexit
import gzip
import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time

_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
_DELAY_UNITS = {"us": 1e-3, "ms": 1.0, "s": 1e3}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # the repository root
CORES = ("shared", "split")  # --cores: every host on all the cores, or each on its own share
UNSHAPED = "unshaped"  # --rate: no tbf, the link moves what the veth and the cores can
TBF_LATENCY = "20ms"  # tbf queue limit, in time at `rate`: deep enough that TCP reaches the rate
GSO_MAX = 65536       # a veth hands tbf GSO packets up to 64 KiB; a smaller bucket splits them

_LIVE = set()         # labs built and not yet closed: what the handlers and atexit clean up
_PREVIOUS = {}        # signal number -> the handler installed before ours
_INSTALLED = False


class NetlabError(RuntimeError):
    """The lab could not be built or driven: not root, or a refused `ip`/`tc` command."""


def parse_rate(text):
    """'1gbit', '100mbit', '10gbit', '500kbit' -> bits per second (tc's units);
    'unshaped' -> None (the veth's own rate)."""
    if text.strip().lower() == UNSHAPED:
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kmgt]?bit)", text.strip().lower())
    if not m or float(m.group(1)) <= 0:
        raise ValueError(f"rate {text!r}: expected a positive number and one of "
                         f"{', '.join(_RATE_UNITS)} (e.g. 1gbit, 100mbit)")
    return float(m.group(1)) * _RATE_UNITS[m.group(2)]


def parse_delay(text):
    """'0ms', '1ms', '250us', '0.5s' -> milliseconds."""
    m = re.fullmatch(r"(\d+(?:\.\d+)?)(us|ms|s)", text.strip().lower())
    if not m:
        raise ValueError(f"delay {text!r}: expected a number and us, ms or s (e.g. 0ms, 1ms)")
    return float(m.group(1)) * _DELAY_UNITS[m.group(2)]


def kernel_hz():
    """CONFIG_HZ of the running kernel from its config, or 100 (the lowest usual value)."""
    for path in ("/proc/config.gz", f"/boot/config-{os.uname().release}"):
        try:
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rt") as fh:
                m = re.search(r"^CONFIG_HZ=(\d+)$", fh.read(), re.M)
            if m:
                return int(m.group(1))
        except OSError:
            continue
    return 100


def tbf_burst(rate_bps):
    """tbf bucket size in bytes for `rate_bps`.

    The classic rule: the bucket must hold what the link sends in one timer
    tick, rate / HZ, or the shaper cannot reach its rate; and at least one
    64 KiB GSO packet, which it would otherwise split.  Measured on a veth
    (HZ 250, 2 cores, one TCP stream, payload rate): at 10gbit a 5 MB bucket
    (= rate/HZ) gave 9.3-9.6 Gbit/s, 64 KiB only 4.6; at 1gbit and 100mbit
    rate/HZ gave 0.96 and 0.10 Gbit/s.  Unshaped, the veth itself moved
    12-24 Gbit/s, so 10gbit is close to what 2 cores can push.  A larger bucket
    only lets more of each step's first bytes through at veth speed.
    """
    if rate_bps is None:  # unshaped
        return None
    return max(int(rate_bps / 8 / kernel_hz()), GSO_MAX)


def _run(cmd, check=True):
    """Runs an `ip`/`tc` command; a failure raises NetlabError naming it and its stderr."""
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise NetlabError(f"`{' '.join(cmd)}` failed (exit {proc.returncode}): "
                          f"{proc.stderr.strip() or proc.stdout.strip()}")
    return proc.stdout


def require_root():
    """Namespaces, veths and qdiscs need CAP_NET_ADMIN: refuse early and clearly."""
    if os.geteuid() != 0:
        raise NetlabError("netlab needs root (network namespaces, veth pairs and tc qdiscs); "
                          "run as root, e.g. with sudo")


class Host:
    """One host: its namespace, its interface (the link) and its address."""

    def __init__(self, index, netns, dev, addr):
        self.index, self.netns, self.dev, self.addr = index, netns, dev, addr

    def __repr__(self):
        return f"Host({self.index}, netns={self.netns}, dev={self.dev}, addr={self.addr})"


class Lab:
    """N hosts in network namespaces joined by a link shaped to `rate` (and `delay`) per
    direction; built on `build()`/`__enter__`, torn down on `close()`/`__exit__`."""

    def __init__(self, hosts=2, rate="1gbit", delay="0ms", cores="shared"):
        if not isinstance(hosts, int) or hosts < 2:
            raise ValueError(f"hosts must be an integer >= 2, got {hosts!r}")
        if cores not in CORES:
            raise ValueError(f"cores must be one of {CORES}, got {cores!r}")
        self.rate, self.delay, self.cores = rate, delay, cores
        self.rate_bps, self.delay_ms = parse_rate(rate), parse_delay(delay)
        self.tag = secrets.token_hex(3)
        rng = secrets.SystemRandom()
        subnet = f"10.{rng.randrange(256)}.{rng.randrange(256)}"
        self.prefix = f"nl{self.tag}"
        self.hosts = [Host(i, f"{self.prefix}h{i}", f"{self.prefix}h{i}", f"{subnet}.{i + 1}")
                      for i in range(hosts)]
        self.switch = f"{self.prefix}sw" if hosts > 2 else None
        self.subnet = f"{subnet}.0/24"
        self._procs = []

    # ------------------------------------------------------------- building --

    def __enter__(self):
        self.build()
        return self

    def __exit__(self, *exc):
        self.close()

    def build(self):
        """Creates the namespaces, the link, the addresses and the shaping."""
        require_root()
        _install_handlers()
        _LIVE.add(self)
        try:
            for ns in self.namespaces():
                _run(["ip", "netns", "add", ns])
                _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            if self.switch:
                self._build_bridge()
            else:
                a, b = self.hosts
                _run(["ip", "link", "add", a.dev, "netns", a.netns, "type", "veth",
                      "peer", "name", b.dev, "netns", b.netns])
            for h in self.hosts:
                _run(["ip", "-n", h.netns, "addr", "add", f"{h.addr}/24", "dev", h.dev])
                _run(["ip", "-n", h.netns, "link", "set", h.dev, "up"])
                self._shape(h.netns, h.dev)
        except BaseException:
            self.close()
            raise
        return self

    def _build_bridge(self):
        """A bridge in the switch namespace with one veth port per host, shaped toward it."""
        bridge = f"{self.prefix}br"
        _run(["ip", "-n", self.switch, "link", "add", bridge, "type", "bridge"])
        _run(["ip", "-n", self.switch, "link", "set", bridge, "up"])
        for h in self.hosts:
            port = f"{self.prefix}s{h.index}"
            _run(["ip", "link", "add", h.dev, "netns", h.netns, "type", "veth",
                  "peer", "name", port, "netns", self.switch])
            _run(["ip", "-n", self.switch, "link", "set", port, "master", bridge])
            _run(["ip", "-n", self.switch, "link", "set", port, "up"])
            self._shape(self.switch, port)

    def _shape(self, ns, dev):
        """tbf on `dev`'s egress, under a netem root when a delay is asked for (unshaped:
        netem alone, or nothing)."""
        tc = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
        if self.rate_bps is None:
            if self.delay_ms > 0:
                _run(tc + ["root", "handle", "1:", "netem", "delay", self.delay])
            return
        tbf = ["tbf", "rate", self.rate, "burst", str(tbf_burst(self.rate_bps)),
               "latency", TBF_LATENCY]
        if self.delay_ms > 0:
            _run(tc + ["root", "handle", "1:", "netem", "delay", self.delay])
            _run(tc + ["parent", "1:1", "handle", "10:"] + tbf)
        else:
            _run(tc + ["root", "handle", "1:"] + tbf)

    def namespaces(self):
        """Every namespace of this lab (hosts, then the switch if any)."""
        return [h.netns for h in self.hosts] + ([self.switch] if self.switch else [])

    # ------------------------------------------------------------- tearing --

    def close(self):
        """Kills every process in the lab's namespaces and deletes them (idempotent)."""
        for proc in self._procs:
            _kill_group(proc)
        for ns in self.existing_namespaces():
            _kill_netns_processes(ns)
        for proc in self._procs:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        for ns in self.existing_namespaces():
            _run(["ip", "netns", "del", ns], check=False)
        _LIVE.discard(self)

    def existing_namespaces(self):
        """This lab's namespaces that still exist (empty after `close`)."""
        lines = _run(["ip", "netns", "list"], check=False).splitlines()
        listed = {line.split()[0] for line in lines if line.strip()}
        return [ns for ns in self.namespaces() if ns in listed]

    # ------------------------------------------------------------- driving --

    def host_cores(self, host):
        """The cores host `host`'s processes run on: every core of this process's set, or
        with cores="split" its own share of them (host i takes the i-th of as many equal
        slices as there are hosts, round robin when the hosts outnumber the cores), so that
        one host's threads never wait for another host's, as on separate machines."""
        allowed = sorted(os.sched_getaffinity(0))
        if self.cores == "shared":
            return allowed
        n = len(self.hosts)
        if n >= len(allowed):
            return [allowed[host % len(allowed)]]
        return allowed[host * len(allowed) // n:(host + 1) * len(allowed) // n]

    def popen(self, host, argv, **kwargs):
        """Starts `argv` inside host `host`'s namespace, on its cores (``host_cores``), in a
        session of its own (so that Ctrl-C at the terminal reaches only us, and the lab
        kills it on close)."""
        pin = None
        if self.cores != "shared":
            cores = self.host_cores(host)
            pin = lambda: os.sched_setaffinity(0, cores)  # noqa: E731 (in the child)
        proc = subprocess.Popen(["ip", "netns", "exec", self.hosts[host].netns] + list(argv),
                                start_new_session=True, preexec_fn=pin, **kwargs)
        self._procs.append(proc)
        return proc

    def msrun(self, host, nworkers, port, log_dir, script, args, stdout=None, cwd=None):
        """One msrun for host `host` (node rank = host index, one worker on it), joined to
        the scheduler that host 0's msrun starts on its address.  msrun runs `script` as a
        file: the repository root leads its PYTHONPATH, so that the script imports the
        examples, benchmarks and tools packages."""
        bindir = os.path.dirname(sys.executable)  # msrun starts `python` from PATH
        pythonpath = os.environ.get("PYTHONPATH")
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""),
                   PYTHONPATH=ROOT + (os.pathsep + pythonpath if pythonpath else ""))
        argv = [os.path.join(bindir, "msrun"), f"--worker_num={nworkers}", "--local_worker_num=1",
                f"--node_rank={host}", f"--master_addr={self.hosts[0].addr}",
                f"--master_port={port}", f"--log_dir={log_dir}", "--join=True", script] + list(args)
        return self.popen(host, argv, env=env, cwd=cwd, stdout=stdout, stderr=subprocess.STDOUT)

    @staticmethod
    def free_port():
        """A port for msrun's scheduler: the namespaces are fresh, so any unprivileged port
        is free there; random, so a reused lab never meets a port in TIME_WAIT."""
        return 20000 + secrets.randbelow(40000)

    def counters(self, host):
        """{'tx_bytes', 'rx_bytes'} of host `host`'s link interface, read inside its namespace."""
        h = self.hosts[host]
        out = _run(["ip", "netns", "exec", h.netns, "cat",
                    f"/sys/class/net/{h.dev}/statistics/tx_bytes",
                    f"/sys/class/net/{h.dev}/statistics/rx_bytes"])
        tx, rx = (int(v) for v in out.split())
        return {"tx_bytes": tx, "rx_bytes": rx}

    def set_link(self, host, up):
        """Takes host `host`'s interface down or brings it back up."""
        h = self.hosts[host]
        _run(["ip", "-n", h.netns, "link", "set", h.dev, "up" if up else "down"])

    def qdisc_stats(self):
        """`tc -s qdisc` of every shaped interface, as one text."""
        parts = []
        for h in self.hosts:
            parts.append(f"[{h.netns} {h.dev}]\n" + _run(["tc", "-n", h.netns, "-s", "qdisc",
                                                           "show", "dev", h.dev]))
            if self.switch:
                port = f"{self.prefix}s{h.index}"
                parts.append(f"[{self.switch} {port}]\n" + _run(
                    ["tc", "-n", self.switch, "-s", "qdisc", "show", "dev", port]))
        return "\n".join(parts)

    def describe(self):
        """One line: hosts, link, addresses."""
        link = "a bridge" if self.switch else "a veth pair"
        shaping = ("unshaped" if self.rate_bps is None else
                   f"{self.rate} per direction, tbf burst {tbf_burst(self.rate_bps)} B")
        cores = ("on all cores" if self.cores == "shared" else "cores " + ", ".join(
            f"{i}: {self.host_cores(i)}" for i in range(len(self.hosts))))
        return (f"{len(self.hosts)} hosts over {link}, {shaping}, delay {self.delay}, "
                f"{cores}, subnet {self.subnet}, tag {self.tag}")


def _kill_group(proc):
    """SIGKILL the process group (session) of a process the lab started."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def _kill_netns_processes(ns, timeout=10.0):
    """SIGKILL every process inside namespace `ns` until none is left (or `timeout`)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [int(p) for p in _run(["ip", "netns", "pids", ns], check=False).split()]
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)


def close_all():
    """Tears down every lab of this process that is still up."""
    for lab in list(_LIVE):
        lab.close()


def _on_signal(signum, frame):
    """Clean up, then do what the previous handler would have done."""
    close_all()
    previous = _PREVIOUS[signum]
    if callable(previous):
        previous(signum, frame)
    else:  # SIG_DFL: die of the signal, as without us
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_handlers():
    """SIGINT/SIGTERM handlers (main thread only, once per process) and the atexit hook."""
    global _INSTALLED
    if _INSTALLED or threading.current_thread() is not threading.main_thread():
        return  # installed already, or not allowed (signal handlers belong to the main thread)
    _INSTALLED = True
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous = signal.getsignal(signum)
        if previous != signal.SIG_IGN:  # an ignored signal (nohup, `cmd &`) stays ignored
            _PREVIOUS[signum] = previous
            signal.signal(signum, _on_signal)
    atexit.register(close_all)


# ----------------------------------------------------------------- self-check --

_SINK = ("import socket,sys,time\n"
         "s=socket.socket();s.bind((sys.argv[1],int(sys.argv[2])));s.listen(1)\n"
         "print('ready',flush=True)\n"
         "c,_=s.accept();n=0;b=bytearray(1<<20);t=None\n"
         "while True:\n"
         " k=c.recv_into(b)\n"
         " if not k: break\n"
         " t=t or time.perf_counter();n+=k\n"
         "print(n,time.perf_counter()-t)\n")
_SOURCE = ("import socket,sys\n"
           "c=socket.create_connection((sys.argv[1],int(sys.argv[2])));b=b'x'*(1<<20)\n"
           "for _ in range(int(sys.argv[3])): c.sendall(b)\n"
           "c.close()\n")


def measure_throughput(lab, mbytes, sender=-1, receiver=0):
    """Streams `mbytes` MiB over one TCP connection from host `sender` to host `receiver`;
    returns the payload rate in bits per second."""
    port, addr = lab.free_port(), lab.hosts[receiver].addr
    sink = lab.popen(receiver, [sys.executable, "-c", _SINK, addr, str(port)],
                     stdout=subprocess.PIPE, text=True)
    sink.stdout.readline()  # 'ready'
    lab.popen(sender % len(lab.hosts), [sys.executable, "-c", _SOURCE, addr, str(port),
                                        str(mbytes)]).wait(timeout=600)
    nbytes, seconds = sink.communicate(timeout=60)[0].split()
    return int(nbytes) * 8 / float(seconds)


def add_lab_arguments(parser):
    """The options of a lab (--hosts, --rate, --delay, --cores), shared by the tools that
    build one."""
    parser.add_argument("--hosts", type=int, default=2,
                        help="number of hosts (>= 2; more than 2 are joined by a bridge)")
    parser.add_argument("--rate", default="1gbit",
                        help="link rate per direction, tc units (1gbit, 100mbit, 10gbit), or "
                             "unshaped")
    parser.add_argument("--delay", default="0ms",
                        help="one-way delay added by netem on every egress (0ms: none)")
    parser.add_argument("--cores", default="shared", choices=CORES,
                        help="shared: every host's processes on all the cores; split: each "
                             "host on its own share of them, as separate machines would be")


def main():
    parser = argparse.ArgumentParser(prog="python -m tools.netlab",
                                     description=__doc__.splitlines()[0])
    add_lab_arguments(parser)
    parser.add_argument("--mbytes", type=int, default=200,
                        help="MiB streamed over one TCP connection from the last host to host 0")
    args = parser.parse_args()
    if args.mbytes < 1:
        parser.error(f"--mbytes must be >= 1, got {args.mbytes}")
    try:
        with Lab(args.hosts, args.rate, args.delay, args.cores) as lab:
            print(lab.describe(), flush=True)
            before = [lab.counters(i) for i in range(len(lab.hosts))]
            rate = measure_throughput(lab, args.mbytes)
            print(f"TCP payload {rate / 1e9:.3f} Gbit/s ({rate / lab.rate_bps:.1%} of {args.rate})")
            for i, b in enumerate(before):
                after = lab.counters(i)
                print(f"host {i}: tx {after['tx_bytes'] - b['tx_bytes']:,} B, "
                      f"rx {after['rx_bytes'] - b['rx_bytes']:,} B")
            print(lab.qdisc_stats())
    except (NetlabError, ValueError) as exc:
        print(f"netlab: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
