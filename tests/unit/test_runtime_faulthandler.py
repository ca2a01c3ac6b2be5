"""Runtime.from_env registers faulthandler on SIGUSR2 (the watchdog's stack dump when py-spy cannot
attach), and never at the cost of the training. Each case runs in a fresh interpreter: signal
handlers are process-wide."""

import subprocess
import sys
import textwrap


def run_probe(code: str, tmp_path) -> subprocess.CompletedProcess:
    script = textwrap.dedent("""
        import os, signal, sys, threading, time
        from slurmctl.runtime import Runtime, install_stack_dump_handler
    """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], check=False, capture_output=True, text=True, timeout=30,
                          env={"SLURMCTL_RUN_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"})


def test_sigusr2_dumps_every_thread_and_the_training_goes_on(tmp_path):
    result = run_probe("""
        Runtime.from_env()
        threading.Thread(target=time.sleep, args=(5,), daemon=True, name="loader").start()
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.2)
        print("still training")
    """, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "still training", result.stderr
    assert "\nThread 0x" in "\n" + result.stderr and "Current thread 0x" in result.stderr  # both threads


def test_a_handler_the_training_installed_is_left_alone(tmp_path):
    result = run_probe("""
        signal.signal(signal.SIGUSR2, lambda *_: print("user handler"))
        Runtime.from_env()
        os.kill(os.getpid(), signal.SIGUSR2)
        time.sleep(0.1)
    """, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "user handler", result.stderr
    assert "Thread 0x" not in result.stderr and "Current thread" not in result.stderr


def test_registering_from_a_thread_twice_or_without_stderr_never_raises(tmp_path):
    result = run_probe("""
        answers = []
        worker = threading.Thread(target=lambda: answers.append(install_stack_dump_handler()))
        worker.start(); worker.join()
        answers.append(install_stack_dump_handler())  # already registered: leave it
        print(answers)
    """, tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == "[True, False]", result.stderr
    no_stderr = run_probe("""
        sys.stderr = None
        print(install_stack_dump_handler())
    """, tmp_path)
    assert no_stderr.returncode == 0 and no_stderr.stdout.strip() == "False", no_stderr.stderr
