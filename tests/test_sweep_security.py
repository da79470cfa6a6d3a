"""A sweep runs no stranger's code and leaves nothing behind (issue 34, items 1, 2, 13 and 14),
tested with real sweeps and real processes: Python planted by another local user (uid 65534) in
Dask's default scratch folder of the temporary folder, or in the current folder, is never
imported by the sweep, its workers or its jobs; a TLS scheduler given by `--address tls://...`
is reached with the user's certificates; and the folder of a SIGKILLed sweep is removed by the
next sweep, never one still in use or not this user's own."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from .conftest import cli, needs_torch, one_line_error, processes_mentioning

WORKLOADS = Path(__file__).parent / "workloads"
TINY = str(WORKLOADS / "tiny_classifier.py")
STUBBORN = str(WORKLOADS / "stubborn.py")  # ignores SIGINT and never finishes building
CPU = ("--device", "cpu", "--batch-size", "2", "--iters", "1", "--warmup", "1", "--tools", "torch")
NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants another user's files: needs root")

# A module another user plants: it leaves a mark (the proof that it ran, and as whom), then hands
# over to the real module of its name, so that the process it got into goes on as if nothing happened.
PLANTED = """\
import importlib, os, sys
with open(os.path.join({marks!r}, __name__ + "-" + str(os.getpid())), "w") as f:
    f.write(str(os.geteuid()))
_root = os.path.dirname(os.path.abspath(__file__))
if os.path.basename(__file__) == "__init__.py":
    _root = os.path.dirname(_root)
sys.path[:] = [p for p in sys.path if os.path.abspath(p or os.curdir) != _root]
del sys.modules[__name__]
importlib.invalidate_caches()
sys.modules[__name__] = importlib.import_module(__name__)
"""
MODULES = (
    "sqlite_utils",
    "msgpack",
    "numpy",
    "torch",
    "yaml",
    "tornado",
    "cloudpickle",
    "toolz",
    "psutil",
)
PACKAGES = ("profkit", "distributed", "dask", "multiprocessing")


def _plant(folder: Path, marks: Path, mode: int = 0o777) -> None:
    """``folder`` made by uid 65534 (another local user) with modules and packages that, if
    imported, leave a mark in ``marks``: made in a child that is that user, as the attack is."""
    pid = os.fork()
    if pid == 0:  # the other user
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            os.umask(0)
            folder.mkdir(mode=mode, exist_ok=True)
            for name in MODULES:
                (folder / f"{name}.py").write_text(PLANTED.format(marks=str(marks)))
            for name in PACKAGES:
                (folder / name).mkdir(mode=0o755)
                (folder / name / "__init__.py").write_text(PLANTED.format(marks=str(marks)))
            os.chmod(folder, mode)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert status == 0, "could not plant as uid 65534"
    assert folder.stat().st_uid == NOBODY


@pytest.fixture
def shared_tmp():
    """A folder like /tmp (root's, world-writable, sticky) that this test alone uses as TMPDIR:
    another user can make folders in it, as in /tmp."""
    folder = Path(tempfile.mkdtemp(prefix="profkit-shared-tmp-"))
    os.chmod(folder, 0o1777)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _marks(tmp_path: Path) -> Path:
    marks = tmp_path / "marks"
    marks.mkdir()
    return marks


def _launcher(tmp_path: Path) -> Path:
    """A script that runs profkit's command line, in a folder of its own: the sweep process
    itself then has neither the current folder nor anything planted on its path (as the
    installed `profkit` command), so what is imported from there was imported by a child."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "profkit_cli.py"
    script.write_text(
        "import sys\nfrom profkit.cli import main\n\nif __name__ == '__main__':\n    sys.exit(main())\n"
    )
    return script


def _runs(db: Path) -> list[tuple[str, str]]:
    con = sqlite3.connect(db)
    try:
        return [tuple(r) for r in con.execute("select name, status from runs order by name")]
    finally:
        con.close()


# ------------------------------------------------------------------------- item 1: Dask's scratch
@as_root
@needs_torch
def test_python_planted_in_dasks_default_scratch_folder_never_runs(tmp_path, shared_tmp):
    """Another local user makes `<tmp>/dask-scratch-space` (and `dask-scratch-space-<uid>`, the
    folder Dask falls back to) before a sweep, with `sqlite_utils.py`, `msgpack.py`, a `profkit/`
    ... in them. Dask puts its scratch folder first on the path of the scheduler, the nannies and
    the workers: without a scratch folder of the sweep's own, that code ran in the sweep and in
    every worker. A real sweep on the CPU (two workers) runs, and nothing planted is imported."""
    pytest.importorskip("distributed")
    marks = _marks(tmp_path)
    _plant(shared_tmp / "dask-scratch-space", marks)
    _plant(shared_tmp / f"dask-scratch-space-{os.geteuid()}", marks)
    db = tmp_path / "s.db"
    env = {**os.environ, "TMPDIR": str(shared_tmp)}
    env.pop("DASK_TEMPORARY_DIRECTORY", None)
    p = subprocess.run(
        [
            sys.executable,
            str(_launcher(tmp_path)),
            "--db",
            str(db),
            "sweep",
            "--workloads",
            TINY,
            "--modes",
            "eager,torchscript",
            *CPU,
            "--workers",
            "2",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sorted(p.name for p in marks.iterdir()) == []
    assert p.returncode == 0, p.stderr
    assert _runs(db) == [
        ("tiny_classifier-fp32-eager-cpu", "ok"),
        ("tiny_classifier-fp32-torchscript-cpu", "ok"),
    ]
    # The sweep made nothing in the shared folder: its scratch was its own, and is gone.
    assert sorted(p.name for p in shared_tmp.iterdir() if "dask" in p.name) == [
        "dask-scratch-space",
        f"dask-scratch-space-{os.geteuid()}",
    ]
    assert not list((tmp_path / "s-runs").glob(".sweep-*"))


def test_the_local_cluster_keeps_its_scratch_in_a_folder_of_its_own(tmp_path, monkeypatch):
    """The scheduler (in this process), the nannies and the workers all have their scratch
    (Dask's `local_directory`, and its `temporary-directory`) in one 0700 folder the cluster made,
    and nothing of it stays on this process's path once the cluster is closed."""
    distributed = pytest.importorskip("distributed")
    from profkit import cluster

    monkeypatch.setenv("TMPDIR", str(tmp_path))  # where Dask would make its own otherwise
    monkeypatch.setattr(tempfile, "tempdir", None)
    scratch = tmp_path / ".sweep-x"
    scratch.mkdir(mode=0o700)
    path_before = list(sys.path)
    with cluster._client(distributed, None, 1, "cpu", scratch) as (client, _, _):

        def where() -> tuple[str, list[str], str | None, str]:
            import dask
            from distributed import get_worker

            return (
                get_worker().local_directory,
                list(sys.path),
                dask.config.get("temporary-directory"),
                os.environ.get("PYTHONSAFEPATH", ""),
            )

        local, worker_path, temporary, safe = client.submit(where).result()
        info = client.scheduler_info()
        nanny_dirs = client.run(lambda dask_worker: dask_worker.local_directory, nanny=True)
        own = [d for d in scratch.iterdir()]
        assert len(own) == 1 and own[0].stat().st_mode & 0o777 == 0o700
        for folder in [local, *nanny_dirs.values(), temporary]:
            assert Path(folder).is_relative_to(own[0]), folder
        assert Path(sys.path[0]).is_relative_to(own[0])  # the scheduler's, in this process
        assert Path(worker_path[0]).is_relative_to(own[0])
        assert safe == "1"
        assert info["workers"]
    assert [p for p in sys.path if p not in path_before] == []
    assert not (tmp_path / "dask-scratch-space").exists()
    assert list(scratch.iterdir()) == []


# --------------------------------------------------------------------- item 2: the current folder
@as_root
@needs_torch
def test_python_in_the_current_folder_is_never_imported_by_a_sweeps_children(tmp_path, shared_tmp):
    """`profkit sweep` run in a folder holding `torch.py`, `numpy.py`, `sqlite_utils.py`, a
    `profkit/` and a `multiprocessing/` (a shared or downloaded folder): the sweep's workers
    (Dask starts them as `python -c ...`), its jobs (`python -m profkit.sweep_job`) and what they
    start import none of them: every child starts with the current folder off its path."""
    pytest.importorskip("distributed")
    marks = _marks(tmp_path)
    # another user's folder (a shared project, say), where the sweep is started
    cwd = shared_tmp / "project"
    _plant(cwd, marks, mode=0o755)
    db = tmp_path / "s.db"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONSAFEPATH"}
    p = subprocess.run(
        [
            sys.executable,
            str(_launcher(tmp_path)),
            "--db",
            str(db),
            "sweep",
            "--workloads",
            TINY,
            *CPU,
            "--workers",
            "1",
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert sorted(p.name for p in marks.iterdir()) == []
    assert p.returncode == 0, p.stderr
    assert _runs(db) == [("tiny_classifier-fp32-eager-cpu", "ok")]


def test_a_sweeps_job_starts_with_the_current_folder_off_its_path(tmp_path, monkeypatch):
    """The job process's command line: `python -P -m profkit.sweep_job`, and PYTHONSAFEPATH in
    its environment, for everything it starts."""
    from profkit import cluster
    from profkit.tools import runner

    seen: dict = {}

    class Fake:
        def __init__(self, argv, log, env=None):
            seen["argv"], seen["env"] = list(argv), dict(env or {})
            self.proc = type("P", (), {"pid": 1})()

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def wait(self):
            return runner.Result(seen["argv"], 0, None, [], 0.0)

    monkeypatch.setattr(runner, "Background", Fake)
    from profkit.options import RunOptions

    cluster.run_job(cluster.JobRequest("resnet18", RunOptions(device="cpu"), str(tmp_path)))
    assert seen["argv"][:4] == [sys.executable, "-P", "-m", "profkit.sweep_job"]
    # what Background starts it with
    assert runner.child_env(seen["env"]).get("PYTHONSAFEPATH") == "1"


def test_the_sweeps_own_environment_is_given_back(tmp_path):
    """Dask sets the variables its workers must start with in this process's environment and
    leaves them there: the cluster gives PYTHONSAFEPATH back as it found it."""
    distributed = pytest.importorskip("distributed")
    from profkit import cluster

    before = os.environ.get("PYTHONSAFEPATH")
    with cluster._client(distributed, None, 1, "cpu", tmp_path):
        assert os.environ.get("PYTHONSAFEPATH") == "1"
    assert os.environ.get("PYTHONSAFEPATH") == before


# --------------------------------------------------------------------------- item 13: TLS scheduler
def _certificates(out: Path) -> None:
    """A CA, and a certificate and key it signed for the scheduler, a worker and a client
    (EC P-256, valid for 127.0.0.1), as a Dask cluster's administrator would make them."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(days=1), now + datetime.timedelta(days=2))

    def pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
        return key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )

    for ca_name_text in ("ca", "other-ca"):
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, ca_name_text)])
        ca = (
            x509.CertificateBuilder()
            .subject_name(ca_name)
            .issuer_name(ca_name)
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(valid[0])
            .not_valid_after(valid[1])
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .sign(ca_key, hashes.SHA256())
        )
        (out / f"{ca_name_text}.pem").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        for who in ("scheduler", "worker", "client"):
            key = ec.generate_private_key(ec.SECP256R1())
            cert = (
                x509.CertificateBuilder()
                .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, who)]))
                .issuer_name(ca_name)
                .public_key(key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(valid[0])
                .not_valid_after(valid[1])
                .add_extension(
                    x509.SubjectAlternativeName(
                        [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
                    ),
                    critical=False,
                )
                .sign(ca_key, hashes.SHA256())
            )
            prefix = "" if ca_name_text == "ca" else "other-"
            (out / f"{prefix}{who}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
            (out / f"{prefix}{who}.key").write_bytes(pem_key(key))


@pytest.fixture(scope="module")
def tls_cluster(tmp_path_factory):
    """A real Dask scheduler and worker speaking TLS on 127.0.0.1 (`dask scheduler` and `dask
    worker`, as a cluster's administrator starts them), with certificates made for them."""
    pytest.importorskip("distributed")
    pytest.importorskip("cryptography")
    certs = tmp_path_factory.mktemp("certs")
    _certificates(certs)
    sched_file = certs / "scheduler.json"
    procs = []
    env = {**os.environ, "DASK_TEMPORARY_DIRECTORY": str(certs)}  # their scratch: not /tmp's

    def tls(who: str) -> list[str]:
        return [
            "--tls-ca-file",
            str(certs / "ca.pem"),
            "--tls-cert",
            str(certs / f"{who}.pem"),
            "--tls-key",
            str(certs / f"{who}.key"),
        ]

    try:
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_scheduler",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    "0",
                    "--protocol",
                    "tls",
                    "--no-dashboard",
                    "--scheduler-file",
                    str(sched_file),
                    *tls("scheduler"),
                ],
                cwd=certs,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(0.5)
        address = json.loads(sched_file.read_text())["address"]
        assert address.startswith("tls://127.0.0.1:")
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "distributed.cli.dask_worker",
                    address,
                    "--nthreads",
                    "1",
                    "--no-dashboard",
                    "--host",
                    "127.0.0.1",
                    *tls("worker"),
                ],
                cwd=certs,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        )
        import distributed
        from distributed.security import Security

        security = Security(
            tls_ca_file=str(certs / "ca.pem"),
            tls_client_cert=str(certs / "client.pem"),
            tls_client_key=str(certs / "client.key"),
            require_encryption=True,
        )
        with distributed.Client(address, security=security, timeout="30s") as client:
            client.wait_for_workers(1, timeout=60)
        yield address, certs
    finally:
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except OSError:
                pass
            p.wait()


def _tls_args(certs: Path, who: str = "client", ca: str = "ca.pem") -> list[str]:
    return [
        "--tls-ca-file",
        str(certs / ca),
        "--tls-cert",
        str(certs / f"{who}.pem"),
        "--tls-key",
        str(certs / f"{who}.key"),
    ]


@needs_torch
def test_a_sweep_on_a_tls_scheduler_with_the_users_certificates(tmp_path, tls_cluster):
    """`--address tls://...` with `--tls-ca-file`, `--tls-cert` and `--tls-key` (the flags `dask
    worker` and `dask scheduler` take): the sweep connects, its job runs on the cluster's worker
    and is stored."""
    address, certs = tls_cluster
    db = tmp_path / "s.db"
    r = cli(
        "sweep",
        "--workloads",
        TINY,
        *CPU,
        "--address",
        address,
        *_tls_args(certs),
        "-f",
        "json",
        db=db,
    )
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert out["engine"] == f"dask ({address})"
    assert [j["status"] for j in out["jobs"]] == ["ok"]
    assert _runs(db) == [("tiny_classifier-fp32-eager-cpu", "ok")]


@needs_torch
def test_a_tls_scheduler_with_certificates_from_dasks_own_config(tmp_path, tls_cluster):
    """Without the flags, the files come from Dask's own configuration (`distributed.comm.tls.ca-file`,
    `distributed.comm.tls.client.cert` and `.key`, in ~/.config/dask or DASK_* variables), as
    every Dask client reads them."""
    import dask

    address, certs = tls_cluster
    db = tmp_path / "s.db"
    with dask.config.set(
        {
            "distributed.comm.tls.ca-file": str(certs / "ca.pem"),
            "distributed.comm.tls.client.cert": str(certs / "client.pem"),
            "distributed.comm.tls.client.key": str(certs / "client.key"),
        }
    ):
        r = cli("sweep", "--workloads", TINY, *CPU, "--address", address, db=db)
    assert r.exit_code == 0, r.output
    assert _runs(db) == [("tiny_classifier-fp32-eager-cpu", "ok")]


def test_a_tls_scheduler_without_certificates_is_one_line(tmp_path, tls_cluster):
    address, certs = tls_cluster
    db = tmp_path / "s.db"
    one_line_error(
        cli("sweep", "--workloads", TINY, *CPU, "--address", address, db=db),
        f"--address {address} is a TLS scheduler, and no CA file or certificate was given",
        2,
    )
    r = cli("sweep", "--workloads", TINY, *CPU, "--address", address, db=db)
    assert "--tls-ca-file" in r.stderr and "distributed.comm.tls" in r.stderr
    assert not db.exists()


BAD_TLS = {  # what is wrong -> (arguments, message)
    "missing CA file": (
        lambda c: [
            "--tls-ca-file",
            str(c / "nosuch.pem"),
            "--tls-cert",
            str(c / "client.pem"),
            "--tls-key",
            str(c / "client.key"),
        ],
        "nosuch.pem",
    ),
    "key that is no key": (
        lambda c: [
            "--tls-ca-file",
            str(c / "ca.pem"),
            "--tls-cert",
            str(c / "client.pem"),
            "--tls-key",
            str(c / "ca.pem"),
        ],
        "--tls-key",
    ),
    "certificate not PEM": (
        lambda c: [
            "--tls-ca-file",
            str(c / "ca.pem"),
            "--tls-cert",
            str(c / "scheduler.json"),
            "--tls-key",
            str(c / "client.key"),
        ],
        "--tls-cert",
    ),
    "certificate without its key": (
        lambda c: ["--tls-ca-file", str(c / "ca.pem"), "--tls-cert", str(c / "client.pem")],
        "holds no private key, and no --tls-key was given",
    ),
    "key of another certificate": (
        lambda c: [
            "--tls-ca-file",
            str(c / "ca.pem"),
            "--tls-cert",
            str(c / "client.pem"),
            "--tls-key",
            str(c / "worker.key"),
        ],
        "is not the key of the certificate",
    ),
    "a pipe": (
        lambda c: [
            "--tls-ca-file",
            "/dev/zero",
            "--tls-cert",
            str(c / "client.pem"),
            "--tls-key",
            str(c / "client.key"),
        ],
        "/dev/zero is not a file",
    ),
}


@pytest.mark.parametrize("case", list(BAD_TLS))
def test_bad_tls_files_are_one_line_before_anything_is_stored(tmp_path, tls_cluster, case):
    address, certs = tls_cluster
    args, message = BAD_TLS[case]
    db = tmp_path / "s.db"
    r = cli("sweep", "--workloads", TINY, *CPU, "--address", address, *args(certs), db=db)
    one_line_error(r, message, 2)
    assert not db.exists()


def test_a_certificate_the_scheduler_does_not_trust_is_one_line(tmp_path, tls_cluster):
    address, certs = tls_cluster
    db = tmp_path / "s.db"
    r = cli(
        "sweep",
        "--workloads",
        TINY,
        *CPU,
        "--address",
        address,
        *_tls_args(certs, "other-client", "other-ca.pem"),
        db=db,
    )
    one_line_error(r, f"no Dask scheduler answered at {address}", 2)
    assert not db.exists() or _runs(db) == []


def test_tls_files_without_a_tls_address_are_one_line(tmp_path):
    pytest.importorskip("distributed")
    for extra in (["--address", "tcp://127.0.0.1:1"], []):
        one_line_error(
            cli(
                "sweep",
                "--workloads",
                TINY,
                *CPU,
                "--tls-ca-file",
                str(tmp_path / "ca.pem"),
                *extra,
                db=tmp_path / "s.db",
            ),
            "--tls-ca-file",
            2,
        )
    assert not (tmp_path / "s.db").exists()


# ------------------------------------------------------------- item 14: a SIGKILLed sweep's folder
@needs_torch
def test_the_folder_of_a_sigkilled_sweep_is_removed_by_the_next_sweep(tmp_path, monkeypatch):
    """SIGKILL of a sweep while its job profiles: its workers and job end (their lifeline), but
    it could not remove its `.sweep-*` folder. The next sweep beside that database removes it (the
    lock the dead sweep held is free, and no job of it is left), and leaves its own folder and
    those that are not a dead sweep's alone."""
    pytest.importorskip("distributed")
    from profkit import cluster

    db = tmp_path / "s.db"
    work = tmp_path / "work"
    work.mkdir()
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "profkit",
            "--db",
            str(db),
            "sweep",
            "--workloads",
            STUBBORN,
            "--device",
            "cpu",
            "--tools",
            "torch",
            "--batch-size",
            "2",
            "--iters",
            "1",
            "--workers",
            "1",
        ],
        cwd=work,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 240
        while (
            not list((tmp_path / "s-runs").glob(".sweep-*/*/job.pid"))
            and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        left = list((tmp_path / "s-runs").glob(".sweep-*"))
        assert len(left) == 1 and list(left[0].glob("*/job.pid")), "the sweep's job never started"
        time.sleep(2)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
        deadline = time.monotonic() + 30
        while processes_mentioning(str(work)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert processes_mentioning(str(work)) == []
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
    assert left[0].is_dir()  # the killed sweep's folder stays, until...
    # ... the next sweep beside the same database (here one running its job in turn).
    monkeypatch.setattr(cluster, "_dask", lambda: None)
    r = cli("sweep", "--workloads", TINY, *CPU, db=db)
    assert r.exit_code == 0, r.output
    assert not left[0].exists()
    assert not list((tmp_path / "s-runs").glob(".sweep-*"))


def _hold_lock(folder: Path) -> subprocess.Popen:
    """A process that holds ``folder``'s lock as a live sweep does (flock of the folder)."""
    p = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(folder)!r}, os.O_RDONLY | os.O_DIRECTORY)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(600)\n",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert p.stdout is not None and p.stdout.readline().strip() == "held"
    return p


@as_root
def test_only_a_dead_sweeps_own_folder_is_removed(tmp_path):
    """What the next sweep removes: a `.sweep-*` folder of this user whose lock is free and
    whose jobs are gone. A live sweep's (its lock held), one whose job still runs, another user's,
    a link (to a folder of this user's), and a file are left as they are."""
    from profkit import cluster

    base = tmp_path / "s-runs"
    base.mkdir()
    os.chmod(base, 0o1777)  # as a shared folder beside a database may be (sticky, as /tmp)
    dead = base / ".sweep-dead"
    (dead / "profkit-sweep-1").mkdir(parents=True)
    (dead / "profkit-sweep-1" / "job.pid").write_text("999999999")
    live = base / ".sweep-live"
    (live / "profkit-sweep-1").mkdir(parents=True)
    holder = _hold_lock(live)
    busy = base / ".sweep-busy"  # its sweep gone, a job of it still stopping
    (busy / "profkit-sweep-1").mkdir(parents=True)
    job = subprocess.Popen(["sleep", "600"])
    (busy / "profkit-sweep-1" / "job.pid").write_text(str(job.pid))
    others = base / ".sweep-others"
    others.mkdir()
    os.chown(others, NOBODY, NOBODY)
    target = tmp_path / "mine"
    target.mkdir()
    (target / "keep").write_text("x")
    (base / ".sweep-link").symlink_to(target)
    (base / ".sweep-file").write_text("x")
    try:
        cluster.remove_dead_scratch(base)
        assert not dead.exists()
        assert live.is_dir() and busy.is_dir() and others.is_dir() and (target / "keep").exists()
        assert (base / ".sweep-link").is_symlink() and (base / ".sweep-file").is_file()
    finally:
        holder.kill()
        job.kill()
        holder.wait()
        job.wait()
    cluster.remove_dead_scratch(base)  # their sweep and job gone now
    assert not live.exists() and not busy.exists() and others.is_dir()


def test_a_sweep_folder_removed_before_its_sweep_locked_it_is_not_used(tmp_path, monkeypatch):
    """A sweep makes its folder, then locks it: a folder another sweep's clean-up took in between
    (free of any lock for that instant) is not used; the sweep makes another."""
    from profkit import cluster

    made: list[Path] = []
    real = tempfile.mkdtemp

    def mkdtemp(*a, **k):
        path = real(*a, **k)
        made.append(Path(path))
        if len(made) == 1:
            cluster.remove_dead_scratch(Path(path).parent)  # as a sweep beside it would
        return path

    monkeypatch.setattr(tempfile, "mkdtemp", mkdtemp)
    folder, fd = cluster.own_scratch(tmp_path)
    try:
        assert len(made) == 2 and not made[0].exists() and folder == made[1] and folder.is_dir()
    finally:
        os.close(fd)
