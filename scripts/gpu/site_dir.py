"""Make a ``pip install --target`` folder work as an environment's site-packages (scripts/gpu/run.sh):
    python scripts/gpu/site_dir.py SITE_DIR BIN_DIR [WHEEL...]
- WHEEL...: where the host has no pip, the wheels are unpacked into SITE_DIR (a wheel is a zip of its files as
  installed; its .data/scripts are left out: BIN_DIR gets the console scripts).
- SITE_DIR/sitecustomize.py: Python imports it at start-up from PYTHONPATH; it makes SITE_DIR a site directory,
  so its .pth files run (fairseq_normformer/fixes/startup.py's hook), then runs the sitecustomize it shadows.
- BIN_DIR: the console scripts of the wheels installed there (fairseq-train, ...) and of this project
  (setup.py's normformer-*), run by this Python; fairseq_normformer.cli.script finds them on PATH.
"""
import ast
import configparser
import sys
import zipfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SITECUSTOMIZE = '''"""Written by scripts/gpu/site_dir.py: this folder is a site directory (its .pth files run)."""
import importlib.util
import os
import site
import sys

here = os.path.dirname(os.path.abspath(__file__))
site.addsitedir(here)
for folder in sys.path:  # the sitecustomize this one shadows, if any
    other = os.path.join(folder or ".", "sitecustomize.py")
    if os.path.abspath(folder or ".") != here and os.path.isfile(other):
        spec = importlib.util.spec_from_file_location("_shadowed_sitecustomize", other)
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        break
'''


def wheel_scripts(site_dir: Path) -> dict:
    """{name: "module:function"} of the console scripts of every distribution installed in ``site_dir``."""
    scripts = {}
    for entry_points in site_dir.glob("*.dist-info/entry_points.txt"):
        parser = configparser.ConfigParser(delimiters=("=",))
        parser.optionxform = str
        parser.read(entry_points)
        if parser.has_section("console_scripts"):
            scripts.update({name: target.strip() for name, target in parser.items("console_scripts")})
    return scripts


def project_scripts(setup_py: Path = REPO_ROOT / "setup.py") -> dict:
    """setup.py's console_scripts, read without running it."""
    for node in ast.walk(ast.parse(setup_py.read_text())):
        if isinstance(node, ast.Dict) and any(isinstance(k, ast.Constant) and k.value == "console_scripts" for k in node.keys):
            entries = ast.literal_eval(node)["console_scripts"]
            return dict(entry.split("=", 1) for entry in entries)
    return {}


def write_script(bin_dir: Path, name: str, target: str):
    module, function = target.split(":")
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\nimport sys\nfrom {module} import {function}\nsys.exit({function}())\n")
    path.chmod(0o755)


def unpack(wheel: Path, site_dir: Path):
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site_dir, [name for name in archive.namelist() if not name.split("/", 1)[0].endswith(".data")])


def main(site_dir: Path, bin_dir: Path, wheels=()):
    for wheel in wheels:
        unpack(wheel, site_dir)
    (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE)
    bin_dir.mkdir(parents=True, exist_ok=True)
    scripts = {**wheel_scripts(site_dir), **project_scripts()}
    for name, target in scripts.items():
        write_script(bin_dir, name, target)
    print(f"[site] {site_dir}: sitecustomize.py; {bin_dir}: {len(scripts)} console scripts")


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python scripts/gpu/site_dir.py SITE_DIR BIN_DIR [WHEEL...]")
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), [Path(w) for w in sys.argv[3:]])
