"""Collection rules for the whole tree: modules that import torch at import time are skipped
where torch is not installed (the ``torch`` extra), as the framework tests skip themselves."""

import importlib.util

collect_ignore_glob: list[str] = []
if importlib.util.find_spec("torch") is None:
    collect_ignore_glob += ["fpemu/validate/watch/*.py", "fpemu/validate/emulate/*.py"]
