"""Vendor the dashboard's JavaScript libraries from the npm registry into services/api/dashboard/vendor/.

    python scripts/vendor_dashboard.py          # fetch the pinned packages (npm pack), copy their files,
                                                # write vendor/VENDOR.json (versions, licences, hashes)

Nothing is built: each package's published, already-minified browser bundle is copied as it is, with its
licence files, except for the patches in PATCHES (each replaces one string that would make the page load
something from the internet; the count of replacements is checked, so a new upstream version that moved it
fails here instead of phoning home). tests/api/test_dashboard.py checks every vendored file against the sha256 in VENDOR.json, so a
file edited by hand or left over from another version fails the suite. To upgrade a library, change its
version below, run this script, and commit the result.
"""
from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENDOR = ROOT / "services" / "api" / "dashboard" / "vendor"

# directory -> (npm package, exact version, {file in the package: file in the directory})
PACKAGES = {
    "d3": ("d3", "7.9.2", {"dist/d3.min.js": "d3.min.js", "LICENSE": "LICENSE"}),
    "plot": ("@observablehq/plot", "0.6.17", {"dist/plot.umd.min.js": "plot.umd.min.js", "LICENSE": "LICENSE"}),
    "swagger-ui": ("swagger-ui-dist", "5.35.0", {
        "swagger-ui-bundle.js": "swagger-ui-bundle.js",
        "swagger-ui-bundle.js.LICENSE.txt": "swagger-ui-bundle.js.LICENSE.txt",
        "swagger-ui.css": "swagger-ui.css", "favicon-32x32.png": "favicon-32x32.png",
        "LICENSE": "LICENSE", "NOTICE": "NOTICE"}),
    "redoc": ("redoc", "2.5.4", {
        "bundles/redoc.standalone.js": "redoc.standalone.js",
        "bundles/redoc.standalone.js.LICENSE.txt": "redoc.standalone.js.LICENSE.txt", "LICENSE": "LICENSE"}),
}


# directory -> file -> [(upstream string, replacement, expected count)]
PATCHES = {
    "redoc": {"redoc.standalone.js": [
        # the "API docs by Redocly" link in ReDoc's side menu shows a logo fetched from Redocly's CDN
        ("https://cdn.redoc.ly/redoc/logo-mini.svg", "dashboard/favicon.svg", 1)]},
}


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fetch(package: str, version: str, workdir: Path) -> tuple[Path, dict]:
    """npm pack the exact version; returns the unpacked package directory and npm's description of it."""
    out = subprocess.run(["npm", "pack", f"{package}@{version}", "--json", "--pack-destination", str(workdir)],
                         check=True, capture_output=True, text=True).stdout
    info = json.loads(out)[0]
    unpacked = workdir / info["filename"].removesuffix(".tgz")
    with tarfile.open(workdir / info["filename"]) as tar:
        tar.extractall(unpacked, filter="data")
    return unpacked / "package", info


def main() -> int:
    if shutil.which("npm") is None:
        print("vendor_dashboard: npm is needed (apt-get install npm)", file=sys.stderr)
        return 2
    manifest = {}
    with tempfile.TemporaryDirectory(prefix="fabricplan-vendor-") as tmp:
        for directory, (package, version, files) in PACKAGES.items():
            src, info = fetch(package, version, Path(tmp))
            meta = json.loads((src / "package.json").read_text())
            dest = VENDOR / directory
            if dest.exists():
                shutil.rmtree(dest)
            dest.mkdir(parents=True)
            for inside, name in files.items():
                shutil.copyfile(src / inside, dest / name)
            for name, edits in PATCHES.get(directory, {}).items():
                text = (dest / name).read_text(encoding="utf-8")
                for old, new, count in edits:
                    if text.count(old) != count:
                        raise SystemExit(f"vendor_dashboard: {package}@{version} {name}: expected {count} x {old!r}, "
                                         f"found {text.count(old)}; review PATCHES")
                    text = text.replace(old, new)
                (dest / name).write_text(text, encoding="utf-8")
            manifest[directory] = {
                "package": package, "version": meta["version"], "license": meta.get("license"),
                "homepage": meta.get("homepage"), "npm_integrity": info["integrity"],
                "files": {name: {"from": inside, "sha256": sha256(dest / name),
                                 **({"patched": [f"{old} -> {new}" for old, new, _ in PATCHES[directory][name]]}
                                    if name in PATCHES.get(directory, {}) else {})}
                          for inside, name in files.items()}}
            print(f"vendored {package}@{meta['version']} ({meta.get('license')}) into {dest.relative_to(ROOT)}",
                  file=sys.stderr)
    (VENDOR / "VENDOR.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
