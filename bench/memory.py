"""Where the gateway's idle RSS comes from: RSS per imported package and per start-up stage.

    .venv/bin/python bench/memory.py [--top 25] [--modules 20]

Runs in a child process (a fresh interpreter):

- **imports**: `import app.serving.cli` (everything the gateway imports at start)
  with a meta-path hook around each module's execution, reading RSS from
  /proc before and after; a module's own cost is its delta minus that of
  the modules it imported first, summed per top-level package. RSS moves by
  pages and allocator arenas, so one module's figure is coarse; the package
  sums and the total are what to read;
- **stages**: RSS after the imports, after `create_app`, and after the
  lifespan start-up (upstream `MCP_SHIM_UPSTREAM_URL`, default a port where
  nothing listens: the start-up only logs that the upstream is unreachable),
  then after `app.serving.cli.release_free_heap()`, which the gateway's server calls
  once its start-up is done (skipped for a `--source` tree without it);
- **rarely used libraries**: which of `cryptography`, `pydantic.v1`,
  `httpcore` are loaded once the gateway has started.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

_CHILD = r"""
import collections, importlib.abc, os, sys

PAGE = os.sysconf("SC_PAGE_SIZE")
TOP, MODULES = int(sys.argv[1]), int(sys.argv[2])
sys.path.insert(0, sys.argv[3])


def rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


own: collections.Counter = collections.Counter()
stack: list = []


class Measure(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is None:
                continue
            loader = spec.loader
            if loader is not None and hasattr(loader, "exec_module"):
                run = loader.exec_module

                def exec_module(module, run=run, name=name):
                    stack.append(0)
                    before = rss()
                    try:
                        run(module)
                    finally:
                        total = rss() - before
                        own[name] += total - stack.pop()
                        if stack:
                            stack[-1] += total

                try:
                    loader.exec_module = exec_module
                except (AttributeError, TypeError):
                    pass
            return spec
        return None


start = rss()
sys.meta_path.insert(0, Measure())
import app.serving.cli  # noqa: E402

imported = rss()
sys.meta_path.pop(0)
packages: collections.Counter = collections.Counter()
for name, size in own.items():
    packages[name.split(".")[0]] += size
print(f"interpreter {start / 1e6:.1f} MB; after import app.serving.cli {imported / 1e6:.1f} MB "
      f"({len(sys.modules)} modules)")
print(f"\nown RSS by top-level package (the {TOP} largest)")
for name, size in packages.most_common(TOP):
    print(f"  {size / 1e6:6.2f} MB  {name}")
print(f"\nown RSS by module (the {MODULES} largest)")
for name, size in own.most_common(MODULES):
    print(f"  {size / 1e6:6.2f} MB  {name}")

import asyncio  # noqa: E402

from app.serving import cli as app_cli  # noqa: E402
from app import logs  # noqa: E402
from app.settings.load import load_settings  # noqa: E402
from app.serving.server import create_app  # noqa: E402

logs.configure("warning")

os.environ.setdefault("MCP_SHIM_UPSTREAM_URL", "http://127.0.0.1:9/mcp")
app = create_app(load_settings())
created = rss()


async def started() -> tuple[int, int | None]:
    async with app.router.lifespan_context(app):
        lifespan = rss()
        release = getattr(app_cli, "release_free_heap", None)
        if release is None:
            return lifespan, None
        release()
        return lifespan, rss()


lifespan, released = asyncio.run(started())
print(f"\nstages: imports {imported / 1e6:.1f} MB, create_app {created / 1e6:.1f} MB, "
      f"lifespan started {lifespan / 1e6:.1f} MB, "
      + (f"free heap released {released / 1e6:.1f} MB" if released else "(no release_free_heap)"))
rare = [m for m in ("cryptography", "pydantic.v1", "httpcore") if m in sys.modules]
print(f"rarely used libraries loaded after start-up: {', '.join(rare) or 'none'}")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--top", type=int, default=25, help="packages listed")
    parser.add_argument("--modules", type=int, default=20, help="modules listed")
    parser.add_argument("--python", default=sys.executable, help="interpreter to measure")
    parser.add_argument(
        "--source", type=Path, default=ROOT, help="source tree to measure (bench/soak.py --source)"
    )
    args = parser.parse_args()
    env = {**os.environ, "MCP_SHIM_LOG_LEVEL": "warning"}
    # Byte-compiled as an installed wheel is (bench/soak.py says why).
    subprocess.run(
        [args.python, "-m", "compileall", "-q", "app", "translators"], cwd=args.source, check=True
    )
    subprocess.run(
        [args.python, "-c", _CHILD, str(args.top), str(args.modules), str(args.source.resolve())],
        cwd=ROOT,
        env=env,
        check=True,
    )


if __name__ == "__main__":
    main()
