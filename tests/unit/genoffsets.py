"""tools/gen-offsets as a module, for the checks of its tables (its TABLES,
its parsing of --arch)."""
import importlib.machinery
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOL = os.path.join(REPO, "tools", "gen-offsets")


def load():
    loader = importlib.machinery.SourceFileLoader("gen_offsets", TOOL)
    spec = importlib.util.spec_from_loader("gen_offsets", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod
