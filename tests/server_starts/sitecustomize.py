"""Counts the vLLM servers a test session starts (tests/conftest.py puts this folder on ``PYTHONPATH`` and prints the
count at the end of ``make test``). Python imports ``sitecustomize`` at every start; in the process that wraps a
server (``generation/server/orphan_guard.py``, which every spawned server runs under, from the test process or from a
``grpo-rollout train`` subprocess) it leaves one file naming the test that started it."""

import os
import sys

_FOLDER = os.environ.get("GRPO_ROLLOUT_TEST_SERVER_STARTS")
if _FOLDER and sys.argv and sys.argv[0].endswith("orphan_guard.py") and "vllm" in " ".join(sys.argv):
    try:
        with open(os.path.join(_FOLDER, str(os.getpid())), "w") as _record:
            _record.write(os.environ.get("PYTEST_CURRENT_TEST", "?").split(" (")[0])
    except OSError:
        pass
