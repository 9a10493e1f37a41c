"""A worker's log files (``supervisor/worker_log.py``) on a real file system: size-based
rotation with a bounded number of files, the previous run's files, the redacting line
splitter of the supervisor's endpoint, and reading a run back, following it across a
rotation and a restart."""

from __future__ import annotations

import os
from pathlib import Path

from stratus.api.redaction import MAX_LINE_BYTES, LineRedactor
from stratus.supervisor.worker_log import LogPump, RunLog, WorkerLogSettings, read_run


def names(directory: Path) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_a_log_rotates_at_its_size_and_keeps_only_its_backups(tmp_path) -> None:
    log = RunLog(tmp_path / "worker.log", WorkerLogSettings(max_bytes=1000, backups=2))
    log.start_run()
    lines = [f"line {n:04d} {'x' * 40}\n".encode() for n in range(200)]  # 10,000 bytes
    for line in lines:
        log.write(line)
    log.write(b"y" * 2500)  # one write larger than a file: cut, never a file over the size
    log.close()
    assert names(tmp_path) == ["worker.log", "worker.log.1", "worker.log.2"]
    sizes = [path.stat().st_size for path in tmp_path.iterdir()]
    assert all(size <= 1000 for size in sizes)
    whole = b"".join(path.read_bytes() for path in log.files(previous=False))
    assert whole == (b"".join(lines) + b"y" * 2500)[-len(whole) :]  # the newest bytes, in order
    assert len(whole) == sum(sizes)


def test_no_backups_keeps_only_the_current_file(tmp_path) -> None:
    log = RunLog(tmp_path / "worker.log", WorkerLogSettings(max_bytes=100, backups=0))
    log.start_run()
    log.write(b"a" * 250)
    log.close()
    assert names(tmp_path) == ["worker.log"]
    assert (tmp_path / "worker.log").read_bytes() == b"a" * 50


def test_a_new_run_makes_the_last_runs_files_the_previous_ones(tmp_path) -> None:
    log = RunLog(tmp_path / "worker.log", WorkerLogSettings(max_bytes=10, backups=1))
    log.start_run()
    log.write(b"first run 1234567\n")  # two files
    log.start_run()
    log.write(b"second\n")
    log.start_run()  # the first run's files are gone, the second's are the previous
    log.write(b"third\n")
    log.close()
    assert names(tmp_path) == ["worker.log", "worker.previous.log"]
    assert b"".join(p.read_bytes() for p in log.files(previous=True)) == b"second\n"
    assert b"".join(p.read_bytes() for p in log.files(previous=False)) == b"third\n"


def test_a_pump_copies_a_pipe_into_the_log_until_eof(tmp_path) -> None:
    log = RunLog(tmp_path / "worker.log", WorkerLogSettings(max_bytes=64, backups=5))
    log.start_run()
    read_end, write_end = os.pipe()
    pump = LogPump(read_end, log)
    for n in range(20):
        os.write(write_end, f"out {n:02d}\n".encode())
    os.close(write_end)
    assert pump.join(timeout=10.0)
    whole = b"".join(path.read_bytes() for path in log.files(previous=False))
    assert whole == b"".join(f"out {n:02d}\n".encode() for n in range(20))
    assert len(log.files(previous=False)) == 3  # 140 bytes in files of 64


def test_reading_a_run_follows_its_current_file_across_a_rotation(tmp_path) -> None:
    log = RunLog(tmp_path / "worker.log", WorkerLogSettings(max_bytes=8, backups=3))
    log.start_run()
    log.write(b"0123456789")  # worker.log.1 holds 8 bytes, worker.log 2
    chunks = read_run(log.files(previous=False), follow=True, newest=log.path)
    seen = b""
    while (chunk := next(chunks)) is not None:
        seen += chunk
    assert seen == b"0123456789"
    log.write(b"abcdefghij")  # fills worker.log, rotates it, and starts a new one
    while (chunk := next(chunks)) is not None:
        seen += chunk
    while (chunk := next(chunks)) is not None:  # the rest is in the new file
        seen += chunk
    assert seen == b"0123456789abcdefghij"
    chunks.close()


def test_the_endpoints_lines_are_redacted_whole_even_when_split_across_chunks() -> None:
    redactor = LineRedactor({"pipeline.env.DB_PASSWORD": "hunter2-db"})
    out = redactor.feed(b"connecting with hunt")
    assert out == b""  # half a line waits for its end
    out += redactor.feed(b"er2-db\nnext ")
    assert out == b"connecting with ***\n"
    assert redactor.flush() == b"next "
    long = LineRedactor({})
    assert len(long.feed(b"z" * MAX_LINE_BYTES)) == MAX_LINE_BYTES  # a line without end
