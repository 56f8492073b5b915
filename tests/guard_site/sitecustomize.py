"""The engine guard (tests/engine_guard.py) in every Python process the tests start: conftest.py puts this folder
on PYTHONPATH and sets KK_ENGINE_GUARD (`strict`: a product run keeps one vLLM engine per process)."""

import os

if os.environ.get("KK_ENGINE_GUARD"):
    from tests.engine_guard import install

    install(strict=os.environ["KK_ENGINE_GUARD"] == "strict")
