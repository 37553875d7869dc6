"""Stopping the servers the tests start."""

import subprocess


def stop_process(proc: "subprocess.Popen[str] | subprocess.Popen[bytes] | None", timeout: float = 10.0) -> None:
    """SIGTERM ``proc`` and wait up to ``timeout`` seconds, then SIGKILL it; nothing when it has ended."""
    if proc is None or proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
