"""no_numpy.py — runs a unittest module with numpy made unimportable, as on a machine
without it: `python3 no_numpy.py test_client [unittest args...]`. Any `import numpy` (by
the client or anything it loads) raises ImportError. The attnd client would also honour
ATTND_NO_NUMPY=1 on its own; this is the stronger check that it never needs numpy."""
import importlib.abc
import sys
import unittest


class _BlockNumpy(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" or name.startswith("numpy."):
            raise ImportError("numpy is hidden by tests/python/no_numpy.py")
        return None


sys.meta_path.insert(0, _BlockNumpy())
for mod in [m for m in sys.modules if m == "numpy" or m.startswith("numpy.")]:
    del sys.modules[mod]

if __name__ == "__main__":
    unittest.main(module=None, argv=[sys.argv[0]] + sys.argv[1:])
