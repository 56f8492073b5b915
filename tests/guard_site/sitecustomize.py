"""The engine guard (tests/engine_guard.py) in every Python process the tests start: conftest.py puts this folder
on PYTHONPATH and sets KK_ENGINE_GUARD (`strict`: a product run keeps one vLLM engine per process)."""

import os

# only as Python's own start-up hook (pytest's doctest collection imports this file too, in the test process)
if __name__ == "sitecustomize" and os.environ.get("KK_ENGINE_GUARD"):
    from tests.engine_guard import install

    install(strict=os.environ["KK_ENGINE_GUARD"] == "strict")
