"""A run's life in profkit's database: its name reserved atomically (a ``runs`` row with status
``running`` or ``importing``, its owner's host and pid, and the run's lock held), its raw folder
made as exclusively as the name, its kernels written (``writes``), and its end: ``ok`` with its
counts and ranges, ``failed`` / ``interrupted`` keeping its row and files, or deleted. A row
whose owner died is recovered when the database is next opened, by a process that takes the
run's lock itself (see ``database``'s description). A run that fails where the database
cannot take its end (a full disk) notes it in its lock file, in room kept there from the
start, and the recovery ends it so: ``failed`` with its error, not ``interrupted``. Runs read
back as ``RunRecord``s."""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import socket
import sqlite3
from pathlib import Path
from typing import Any, TypedDict

from ..errors import BadExport, EmptyCapture, RunExists, RunNotFound, StoreError, did_you_mean
from ..files import disk_full, own_folder, untrusted
from ..options import MAX_NAME, check_run_name
from ..parse.schema import Capture, ClassifiedRow
from ..processes import alive
from ..records import RunInfo, RunRecord
from .connection import as_id, unwritable
from .layout import HOST_SYNC_TABLE_COLUMNS, JSON_RUN_COLUMNS, RANGE_TABLE_COLUMNS
from .migrations import set_max_run_id
from .writes import Writes

# Run statuses: complete, and being written by the owner process. (A run that ended without
# kernels is "failed" or "interrupted".)
OK, WRITING = "ok", ("running", "importing")
ENDED_WITHOUT_KERNELS = ("failed", "interrupted")  # a name held by one of these can be used again
LOCKED = "+lock"  # an owner that holds its run's lock (schema 9 on); without it, an owner of an earlier profkit
MAX_FOLDERS = 1000  # names a run's raw folder tries (<name>, <name>-2, ...) before it gives up


class RunFields(TypedDict, total=False):
    """A new run's columns, as a caller of :meth:`Store.add_run` gives them (see RunRecord);
    the store adds the id, the counts and the capture's notes."""

    name: str
    source: str
    status: str
    workload: str | None
    precision: str | None
    mode: str | None
    batch_size: int | None
    iters: int | None
    device: str | None
    tool: str | None
    tool_version: str | None
    metric_set: str | None
    metrics: list[str]
    gpu_name: str | None
    compute_capability: str | None
    command: list[str]
    started_at: str
    finished_at: str
    raw_files: dict[str, str]
    source_sha256: str
    profiled_wall_s: float
    info: RunInfo  # merged into the reserved run's info (its keys first)


def raw_dir(db: Path, run_name: str) -> Path:
    """``<db stem>-runs/<run name>/`` beside the database (the folder a run of an earlier
    profkit has; a run's own is :meth:`Store.run_folder`); refused if it would lead elsewhere
    (a name that is not a plain file name, or a run folder that is a link out)."""
    check_run_name(run_name)
    return _in_runs(db, run_name)


def _in_runs(
    db: Path, folder_name: str, hint: str = "Remove that link, or choose another `name`."
) -> Path:
    """``<db stem>-runs/<folder_name>``, or a StoreError (with ``hint``) where that would lead
    elsewhere."""
    base = db.resolve().parent / f"{db.stem}-runs"
    folder = base / folder_name
    if (
        not re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_.-]*", folder_name)
        or folder.resolve().parent != base.resolve()
    ):
        raise StoreError(f"the raw folder {folder} leads outside {base}", hint)
    return folder


# Run locks this process holds, by lock file path (any Store of this process releases them): flock
# locks belong to an open file, so another open of the same file (another process, or another
# Store here) cannot take them while the owner lives.
_HELD: dict[str, int] = {}
# Room a lock file keeps (written when the lock is taken) for its run's end, where the database
# cannot take it: overwritten in place, it needs no new space on a full disk.
NOTE_BYTES = 4096


class Runs(Writes):
    """Reserving, writing, ending, recovering and reading runs."""

    # ------------------------------------------------------------------ names
    def unique_name(self, base: str) -> str:
        """``base`` made a usable run name, with ``-2``, ``-3``... if taken (read at this moment:
        :meth:`reserve` takes the name under the write lock)."""
        base = (
            re.sub(r"[^A-Za-z0-9_.-]+", "-", base).strip("-.")[: MAX_NAME - 8].strip("-.") or "run"
        )
        if base.isdigit():
            base = f"run-{base}"
        taken = {
            r["name"]
            for r in self.query(
                "select name from runs where name = ? or name like ?", [base, base + "-%"]
            )
        }
        if base not in taken:
            return base
        n = 2
        while f"{base}-{n}" in taken:
            n += 1
        return f"{base}-{n}"

    def check_name_free(self, name: str) -> None:
        check_run_name(name)
        row = self.execute("select status from runs where name = ?", [name]).fetchone()
        if row:
            what = (
                ""
                if row[0] == OK
                else f" ({row[0]}: being written now)"
                if row[0] in WRITING
                else f" ({row[0]})"
            )
            raise RunExists(
                f"a run named {name!r} already exists in {self.path}{what}",
                "Choose another `name`.",
            )

    def name_status(self, name: str) -> str | None:
        """The status of the run named ``name``, or None where there is none."""
        row = self.execute("select status from runs where name = ?", [name]).fetchone()
        return None if row is None else str(row[0])

    def runs_of_file(self, sha256: str) -> list[str]:
        """Names of the complete runs imported from a file with this SHA-256."""
        return [
            r["name"]
            for r in self.query(
                "select name from runs where source_sha256 = ? and status = ? order by id",
                [sha256, OK],
            )
        ]

    # ------------------------------------------------------------------ writing
    def reserve(
        self, name: str | None, base: str, fields: RunFields, status: str = "importing"
    ) -> RunRecord:
        """Take a run name atomically: ``name`` (refused if taken) or the first free one made
        from ``base``; insert the run's row with ``status`` (``running`` or ``importing``) and
        this process as its owner. Nothing else may take the name from now on."""
        row = _encoded(
            {
                **fields,
                "status": status,
                "owner": _owner() + LOCKED,
                "kernel_count": 0,
                "gpu_time_ns": 0,
            }
        )
        row.pop("folder", None)
        run_id = 0
        replaced: RunRecord | None = None
        try:
            with self.write():
                if name is not None:
                    replaced = self._replace_ended(name)
                    self.check_name_free(name)
                row["name"] = name if name is not None else self.unique_name(base)
                set_max_run_id(self)
                run_id = row["id"] = int(
                    self.execute(
                        "select cast(value as integer) + 1 from meta where key = 'max_run_id'"
                    ).fetchone()[0]
                )
                # The lock is held before the row can be seen: a reader never finds a new run unlocked.
                self._lock(run_id)
                self._insert("runs", row)
                set_max_run_id(self)
        except BaseException as exc:
            if run_id:
                self._unlock(run_id)
            if isinstance(exc, sqlite3.OperationalError):
                raise unwritable(self.path, exc) from exc
            raise
        if replaced is not None:
            try:
                self._remove_folder(replaced)
            except (OSError, StoreError):
                pass  # its files stay where they are; the new run's folder is another (reserve_folder)
        return self.get_run(run_id)

    def _replace_ended(self, name: str) -> RunRecord | None:
        """Inside a write transaction: the run named ``name`` deleted (its rows and its row) if it
        ended without kernels (``failed`` or ``interrupted``), so that its name can be used again:
        running the same named run again after a failure replaces the failure. Returns it (its
        folder is the caller's to remove, after the transaction), else None."""
        row = self.execute("select id, status from runs where name = ?", [name]).fetchone()
        if row is None or row[1] not in ENDED_WITHOUT_KERNELS:
            return None
        ended = self.get_run(int(row[0]))
        self._forget(ended.id)
        return ended

    # ------------------------------------------------------------------ run locks and raw folders
    def _lock_path(self, run_id: int) -> Path:
        return self.path.resolve().parent / f"{self.path.name}-locks" / f"{run_id}.lock"

    def _lock(self, run_id: int) -> None:
        """Take run ``run_id``'s lock (held until :meth:`_unlock` or this process ends)."""
        path = self._lock_path(run_id)
        own_folder(path.parent, "lock folder")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StoreError(
                f"cannot make the lock file {path}: {exc.strerror}",
                "Check the folder's permissions and the free disk space.",
            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StoreError(
                f"cannot lock {path}: {exc.strerror}",
                "Another process holds it; check what else uses this database.",
            ) from None
        try:
            os.pwrite(fd, b" " * NOTE_BYTES, 0)  # the room for the run's end (see _note_end)
        except OSError as exc:
            os.close(fd)
            raise disk_full(path, exc) or StoreError(
                f"cannot write the lock file {path}: {exc.strerror}"
            ) from None
        _HELD[str(path)] = fd

    def _note_end(self, run_id: int, status: str, error: str) -> None:
        """Note a run's end in its lock file's room, in place (no new space needed), for the
        recovery to end it so where the database could not take it; best effort."""
        fd = _HELD.get(str(self._lock_path(run_id)))
        if fd is not None:
            note = json.dumps({"status": status, "error": error[: NOTE_BYTES // 2]}).encode()[
                :NOTE_BYTES
            ]
            try:
                os.pwrite(fd, note.ljust(NOTE_BYTES), 0)
            except OSError:
                pass  # the recovery then ends it as interrupted

    def _unlock(self, run_id: int) -> None:
        """Give up a run's lock, if this process holds it: the file goes first, then the lock."""
        path = self._lock_path(run_id)
        fd = _HELD.pop(str(path), None)
        if fd is not None:
            path.unlink(missing_ok=True)
            os.close(fd)

    def _dead_owner_lock(self, run_id: int) -> int | None:
        """The lock of a run whose owner is gone, taken (an open file to close), or None while
        its owner holds it (or its lock file is missing, or in a folder another user could have
        swapped it in: nothing proves the owner dead)."""
        path = self._lock_path(run_id)
        if untrusted(path.parent):
            return None
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        return fd

    def run_folder(self, run: RunRecord) -> Path:
        """A run's raw folder: the one made for it (:meth:`reserve_folder`), or for a run of an
        earlier profkit (none recorded) ``<db stem>-runs/<run name>/``."""
        return _in_runs(self.path, run.folder) if run.folder else raw_dir(self.path, run.name)

    def runs_base(self) -> Path:
        """``<db stem>-runs/`` beside the database, made if missing, and refused (a StoreError)
        where it is not this user's to trust (:func:`profkit.files.untrusted`: a link or folder
        another user put there would have the runs' files written elsewhere)."""
        return own_folder(
            self.path.resolve().parent / f"{self.path.stem}-runs", "folder of runs' files"
        )

    def reserve_folder(self, run: RunRecord) -> Path:
        """Make a reserved run's raw folder, as exclusively as its name: ``<db stem>-runs/<name>/``,
        or where that exists already (a database of the same stem has a run of that name, a
        folder was left or put there) ``<name>-2``, ``<name>-3``... Made now by this process
        (``os.mkdir``, never an existing folder) and recorded with the run. profkit deletes or
        overwrites no folder it did not make for the run."""
        base = self.runs_base()
        try:
            for n in range(1, MAX_FOLDERS + 1):
                folder = base / (run.name if n == 1 else f"{run.name}-{n}")
                try:
                    os.mkdir(folder)
                except FileExistsError:
                    continue
                break
            else:
                raise StoreError(
                    f"no free raw folder for run {run.name!r} in {base} ({MAX_FOLDERS} names taken)",
                    "Clear out that folder, or use another database.",
                )
        except OSError as exc:
            raise StoreError(
                f"cannot make the raw folder of run {run.name!r} in {base}: {exc.strerror or exc}",
                "Check the folder's permissions and the free disk space.",
            ) from None
        try:
            with self.write():
                self._update("runs", run.id, {"folder": folder.name})
        except BaseException as exc:
            folder.rmdir()  # made just now, and still empty
            if isinstance(exc, sqlite3.OperationalError):
                raise unwritable(self.path, exc) from exc
            raise
        return folder

    def fill_run(
        self, run: RunRecord, capture: Capture[ClassifiedRow], fields: RunFields | None = None
    ) -> RunRecord:
        """Write a reserved run's classified rows (streamed, in batches of short transactions),
        then in one last transaction its aggregates (``writes.write_aggregates``), counts, ranges,
        host syncs, notes, ``fields`` and status ``ok``.
        If anything fails (or is interrupted) the rows written so far are removed again before
        the error goes on; the run's row is the caller's to end (:meth:`end_run`,
        :meth:`delete_run`)."""
        try:
            if capture.bulk is not None:
                activity, count, total = capture.bulk(self, run.id)
                if not count:
                    raise EmptyCapture(
                        "the capture holds no kernel launches and no CPU operator calls"
                    )
            else:
                activity, count, total = self._insert_kernels(run.id, capture.rows)
            if activity == "kernel":
                self.judge_by_run(run.id, (fields or {}).get("precision") or run.precision)
            info = {**run.info, **((fields or {}).get("info") or {}), "notes": list(capture.notes)}
            update = _encoded(
                {
                    **(fields or {}),
                    "activity": activity,
                    "kernel_count": count,
                    "gpu_time_ns": total,
                    "info": info,
                    "status": OK,
                    "owner": None,
                }
            )
            if activity == "cpu_op" and not (run.device or update.get("device")):
                update["device"] = "cpu"  # CPU operators ran on the CPU, whatever the file said
            with self.write():
                self.write_aggregates(run.id)  # the rows are final: what the analyses read
                if capture.ranges:
                    self._insert_all(
                        "ranges",
                        list(RANGE_TABLE_COLUMNS),
                        capture.ranges,
                        {"run_id": run.id},
                    )
                if capture.host_syncs:
                    self._insert_all(
                        "host_syncs",
                        list(HOST_SYNC_TABLE_COLUMNS),
                        capture.host_syncs,
                        {"run_id": run.id},
                    )
                self._update("runs", run.id, update)
        except BaseException as exc:
            self._clear_rows(run.id)
            if isinstance(exc, sqlite3.OperationalError):
                raise unwritable(self.path, exc) from exc
            if isinstance(exc, OverflowError):  # a value, or the run's summed time, past 2^63
                raise BadExport(f"the capture holds a number too large to store ({exc})") from None
            raise
        self._unlock(run.id)
        return self.get_run(run.id)

    def add_run(self, fields: RunFields, capture: Capture[ClassifiedRow]) -> RunRecord:
        """Reserve ``fields["name"]`` and write the capture as a complete run; on any failure
        nothing of it stays. Returns the run."""
        run = self.reserve(fields["name"], fields["name"], fields)
        try:
            return self.fill_run(run, capture)
        except BaseException:
            self.delete_run(run.id)
            raise

    def set_raw_files(self, run_id: int, files: dict[str, str]) -> None:
        """Record where a run's kept files are (``profkit sweep`` moves a job's folder here)."""
        with self.write():
            self._update("runs", run_id, _encoded({"raw_files": files}))

    def end_run(self, run_id: int, status: str, error: str) -> None:
        """Mark a reserved run that ended without kernels (``failed`` or ``interrupted``),
        with the error in its info; its row and raw files stay, its name stays taken."""
        run = self.get_run(run_id)
        info = {**run.info, "error": error}
        try:
            with self.write():
                self._update(
                    "runs", run_id, _encoded({"status": status, "owner": None, "info": info})
                )
        except BaseException as exc:
            # the lock stays held, the file kept, until this process ends
            self._note_end(run_id, status, error)
            if isinstance(exc, sqlite3.OperationalError):
                raise unwritable(self.path, exc) from exc
            raise
        self._unlock(run_id)

    def delete_run(self, run_id: int) -> None:
        """Remove a run and everything of it from the database (not its raw files); its id is
        never given again."""
        with self.write():
            self._forget(run_id)
        self._unlock(run_id)

    def remove_run(self, ref: str | int) -> tuple[RunRecord, Path | None]:
        """Delete a run (by name or id) that is not being written: in one transaction its row and
        every row of it (kernel rows and their aggregates, ranges, host syncs, and the ncu
        counters read from it, which later runs would otherwise reuse), then its raw folder (the
        one made for it in ``<db stem>-runs/``: never a folder it was not given, never through a
        link, never outside that folder). Returns the run as it was and the folder deleted (None
        where it had none of its own: a run imported in place keeps no files, and an earlier
        profkit's recorded none). RunNotFound if there is no such run; a StoreError, before
        anything is deleted, for a run still being written or a folder that leads elsewhere."""
        run = self.get_run(ref)
        folder = self._own_folder(run)  # checked before anything goes
        try:
            with self.write():
                row = self.execute(
                    "select status, owner from runs where id = ?", [run.id]
                ).fetchone()
                if row is None:
                    raise RunNotFound(
                        f"no run {str(ref)!r} in {self.path}", "It was deleted meanwhile."
                    )
                if row[0] in WRITING:
                    owner = (row[1] or "?").removesuffix(LOCKED)
                    raise StoreError(
                        f"run {run.name!r} is being written now ({row[0]}, by the profkit process "
                        f"{owner})",
                        "Wait for it to end, or stop that process: a run whose process died is marked "
                        "interrupted the next time the database is opened.",
                    )
                self._forget(run.id)
        except sqlite3.OperationalError as exc:
            raise unwritable(self.path, exc) from exc
        if folder is not None:
            self._remove_folder(run)
        return run, folder

    def _forget(self, run_id: int) -> None:
        """Inside a write transaction: a run's rows in every table that holds any, then its row."""
        self._delete_rows(run_id)
        self.execute("delete from counters where run_id = ?", [run_id])
        self.execute("delete from runs where id = ?", [run_id])

    def _own_folder(self, run: RunRecord) -> Path | None:
        """The raw folder made for ``run`` (recorded in its ``folder``), if it is there as a
        folder; None where it has none of its own or it is gone. A StoreError where it, or the
        folder of runs, is a link or leads out of ``<db stem>-runs/``, or another user could
        have put it there (:func:`profkit.files.untrusted`)."""
        if not run.folder:
            return None
        # a plain name, inside the folder of runs; else nothing is deleted, the run neither
        folder = _in_runs(
            self.path,
            run.folder,
            "Nothing was deleted: the run's recorded folder is not one profkit made; remove what is "
            "there yourself if it is yours.",
        )
        if not os.path.lexists(folder):
            return None
        why = untrusted(folder.parent) or untrusted(folder)
        if why is not None or folder.is_symlink() or not folder.is_dir():
            raise StoreError(
                f"the raw folder {folder} of run {run.name!r} is not one profkit made for it "
                f"({why or 'a link or a file'})",
                "Remove it yourself if it is yours, and try again.",
            )
        return folder

    def _remove_folder(self, run: RunRecord) -> None:
        """Delete the raw folder made for ``run`` (:meth:`_own_folder`), and all in it. shutil's
        rmtree works through open folder descriptors here (``rmtree.avoids_symlink_attacks``):
        a link inside is removed, never followed."""
        folder = self._own_folder(run)
        if folder is None:
            return
        if not shutil.rmtree.avoids_symlink_attacks:
            raise StoreError(f"cannot remove {folder} safely on this system", "Remove it yourself.")
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            raise StoreError(
                f"run {run.name!r} is deleted, but not all of its folder {folder}: {exc.strerror or exc}",
                "Remove what is left yourself.",
            ) from None

    def _clear_rows(self, run_id: int) -> None:
        """Remove a run's kernel and range rows, keeping its row; best effort."""
        try:
            with self.write():
                self._delete_rows(run_id)
        except sqlite3.Error:
            pass  # the recovery at the next open removes them

    def _delete_rows(self, run_id: int) -> None:
        for table in (
            "launches",
            "kernel_groups",
            "kernel_aggs",
            "path_aggs",
            "ranges",
            "host_syncs",
            "tune_trials",
        ):
            self.execute(f"delete from {table} where run_id = ?", [run_id])

    def _recover(self) -> None:
        """Runs whose owner is gone (killed mid-write): an import leaves nothing; a profiled run
        is marked interrupted and keeps its row and raw files. An owner is proved gone by taking
        its run's lock (the kernel released it when the owner died), in whatever PID namespace
        either process runs: a pid is no proof (another namespace's pids are not seen here).
        An owner of an earlier profkit (no lock, no ``+lock`` in ``owner``) is gone when its pid
        is gone on this host, as then."""
        rows = list(
            self.query("select id, status, owner from runs where status in (?, ?)", list(WRITING))
        )
        for r in rows:
            owner = r["owner"] or ""
            fd = None
            if owner.endswith(LOCKED):
                fd = self._dead_owner_lock(r["id"])
                if fd is None:
                    continue  # alive (or its lock file was removed: nothing proves it dead)
            else:
                host, _, pid = owner.rpartition(":")
                if not (host == socket.gethostname() and pid.isdigit() and not alive(int(pid))):
                    continue
            ended = False
            try:
                ended = self._recover_run(r["id"], owner, _noted_end(fd))
            except sqlite3.OperationalError:
                pass  # a read-only database: reading it still works; a writer recovers the rows later
            finally:
                if fd is not None:
                    if ended:  # the lock file goes with the run's recovery, never before it
                        try:
                            self._lock_path(r["id"]).unlink(missing_ok=True)
                        except OSError:
                            pass  # a read-only folder: the file stays, harmless
                    os.close(fd)

    def _recover_run(self, run_id: int, owner: str, noted: tuple[str, str] | None = None) -> bool:
        """In one transaction, if the run is still being written by ``owner``: an import is
        deleted, a profiled run marked interrupted (its rows removed), or as its owner noted
        its end in the lock file (``noted``: status, error). True once the run is no longer
        ``owner``'s to write (recovered here, or it ended meanwhile)."""
        with self.write():
            row = self.execute(
                "select status, owner, info from runs where id = ?", [run_id]
            ).fetchone()
            if row is None or row[0] not in WRITING or row[1] != owner:
                return True  # it ended meanwhile
            self._delete_rows(run_id)
            if row[0] == "importing":
                self.execute("delete from runs where id = ?", [run_id])
                return True
            status, error = noted or (
                "interrupted",
                f"the profkit process {owner.removesuffix(LOCKED)} ended before the run was stored",
            )
            info = {**json.loads(row[2] or "{}"), "error": error}
            self._update("runs", run_id, _encoded({"status": status, "owner": None, "info": info}))
        return True

    # ------------------------------------------------------------------ reading runs
    def runs(self) -> list[RunRecord]:
        return [_run(r) for r in self.query("select * from runs order by id")]

    def get_run(self, ref: str | int) -> RunRecord:
        """A run by id (digits) or name."""
        ref = str(ref)
        row = None
        if (run_id := as_id(ref)) is not None:
            row = next(self.query("select * from runs where id = ?", [run_id]), None)
        if row is None:
            row = next(self.query("select * from runs where name = ?", [ref]), None)
        if row is None:
            everyone = [r["name"] for r in self.query("select name from runs order by id desc")]
            hint = (
                f"Recent runs: {', '.join(everyone[:5])}."
                if everyone
                else "The database has no runs yet."
            )
            raise RunNotFound(f"no run {ref!r} in {self.path}", did_you_mean(ref, everyone, hint))
        return _run(row)


def _noted_end(fd: int | None) -> tuple[str, str] | None:
    """The end a run's owner noted in its lock file (``Runs._note_end``): (status, error), or None."""
    if fd is None:
        return None
    try:
        note = json.loads(os.pread(fd, NOTE_BYTES, 0).strip() or b"null")
    except (OSError, ValueError):
        return None
    if (
        isinstance(note, dict)
        and note.get("status") in ("failed", "interrupted")
        and isinstance(note.get("error"), str)
    ):
        return note["status"], note["error"]
    return None


def _encoded(row: dict[str, Any]) -> dict[str, Any]:
    """A runs row with its JSON columns (metrics, command, raw_files, info) as JSON text."""
    return {
        k: json.dumps(v.to_dict() if isinstance(v, RunInfo) else v)
        if k in JSON_RUN_COLUMNS and v is not None
        else v
        for k, v in row.items()
    }


def _owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


def _run(row: dict[str, Any]) -> RunRecord:
    row = dict(row)
    row.pop("owner", None)
    for key in JSON_RUN_COLUMNS:
        if row.get(key) is not None:
            row[key] = json.loads(row[key])
        else:
            row.pop(key, None)
    for key in ("activity", "kernel_count", "gpu_time_ns"):
        if row.get(key) is None:
            row.pop(key, None)
    return RunRecord(**row)
