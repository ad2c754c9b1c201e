"""Tests for nspy_tutorial/resources/install_ncu.sh (also reachable as scripts/install_ncu.sh).

Every test runs the real script under bash with a PATH made of two directories only:
fake executables written here (ncu, apt-get, dpkg, curl, wget, id, uname) and symlinks to
the few real basic tools the script and the fakes need. So a missing apt-get or curl is
really missing, even on a machine that has them. Each fake appends its argv to a call log.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "install_ncu.sh"
RESOURCE = ROOT / "nspy_tutorial" / "resources" / "install_ncu.sh"
REPO = "https://developer.download.nvidia.com/compute/cuda/repos"

# Real tools the script and the fakes may use. sha256sum and timeout are optional extras.
NEEDED_TOOLS = [
    "bash", "cat", "chmod", "cp", "cut", "dirname", "basename", "grep", "head", "ls",
    "mkdir", "mktemp", "rm", "sed", "awk", "sort", "tail", "tee", "touch", "tr",
]
OPTIONAL_TOOLS = ["sha256sum", "timeout"]

BASH = shutil.which("bash")
if BASH is None:  # pragma: no cover - bash is everywhere the tutorial runs
    pytest.skip("bash is not installed", allow_module_level=True)

FAKE_ID = r"""
echo "id $*" >> "$FAKE_LOG"
if [ "$1" = -u ]; then echo "${FAKE_UID:-0}"; else echo "uid=${FAKE_UID:-0}"; fi
"""

FAKE_UNAME = r"""
echo "uname $*" >> "$FAKE_LOG"
if [ "$1" = -m ]; then echo "${FAKE_ARCH:-x86_64}"; else echo Linux; fi
"""

# apt-get install X succeeds only for versions listed in FAKE_APT_OK that have a fake package;
# apt-get install /path/to/x.deb installs the downloaded file (what the download fallback does);
# FAKE_APT_LOCKED=1: another process holds the dpkg lock, as apt says it.
FAKE_APT_GET = r"""
echo "apt-get $*" >> "$FAKE_LOG"
echo "Reading package lists... Done"
if [ "${FAKE_APT_LOCKED:-0}" = 1 ]; then
  echo "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 4242 (apt-get)" >&2
  exit 100
fi
case "$1" in -o) shift 2 ;; esac
case "$1" in
  update) exit "${FAKE_APT_UPDATE_RC:-0}" ;;
  install)
    pkg=""
    for a in "$@"; do
      case "$a" in
        */*.deb)
          cp "$a" "$FAKE_ROOT/dpkg_i_received.deb"
          if [ "${FAKE_DPKG_I_FAIL:-0}" = 1 ]; then echo "E: Sub-process /usr/bin/dpkg returned an error code (1)" >&2; exit 100; fi
          name=$(basename "$a"); pkg=${name%%_*}
          echo "Unpacking $pkg ..."
          bash "$FAKE_PKGS/$pkg.install" && touch "$FAKE_PKGS/$pkg.installed"
          exit $? ;;
        nsight-compute-*) pkg=$a ;;
      esac
    done
    ver=${pkg#nsight-compute-}
    for ok in ${FAKE_APT_OK:-}; do
      if [ "$ok" = "$ver" ] && [ -f "$FAKE_PKGS/$pkg.install" ]; then
        echo "Setting up $pkg ..."
        bash "$FAKE_PKGS/$pkg.install" && touch "$FAKE_PKGS/$pkg.installed"
        exit $?
      fi
    done
    echo "E: Unable to locate package $pkg" >&2
    exit 100 ;;
esac
exit 0
"""

# apt-cache show PKG: the size of a package apt could install (FAKE_APT_OK).
FAKE_APT_CACHE = r"""
echo "apt-cache $*" >> "$FAKE_LOG"
for a in "$@"; do case "$a" in nsight-compute-*) pkg=$a ;; esac; done
for ok in ${FAKE_APT_OK:-}; do
  if [ "nsight-compute-$ok" = "$pkg" ]; then printf 'Package: %s\nSize: 393216000\n' "$pkg"; exit 0; fi
done
exit 100
"""

FAKE_DPKG = r"""
echo "dpkg $*" >> "$FAKE_LOG"
case "$1" in
  -L)
    if [ -f "$FAKE_PKGS/$2.installed" ]; then cat "$FAKE_PKGS/$2.list"; exit 0; fi
    echo "dpkg-query: package '$2' is not installed" >&2
    exit 1 ;;
  -s)
    [ -f "$FAKE_PKGS/$2.installed" ]
    exit $? ;;
  -i)
    cp "$2" "$FAKE_ROOT/dpkg_i_received.deb"
    if [ "${FAKE_DPKG_I_FAIL:-0}" = 1 ]; then
      echo "dpkg: error processing archive $2" >&2
      exit 1
    fi
    name=$(basename "$2")
    pkg=${name%%_*}
    echo "Selecting previously unselected package $pkg."
    echo "Unpacking $pkg ..."
    bash "$FAKE_PKGS/$pkg.install" && touch "$FAKE_PKGS/$pkg.installed"
    exit $? ;;
  -r)
    rm -f "$FAKE_PKGS/$2.installed"
    exit 0 ;;
esac
exit 0
"""

# The fake web: URL https://host/path is served from $FAKE_WEB/host/path.
FAKE_CURL = r"""
echo "curl $*" >> "$FAKE_LOG"
out=-; url=""
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift ;;
    -*) ;;
    *) url=$1 ;;
  esac
  shift
done
if [ "${FAKE_NET_DOWN:-0}" = 1 ]; then
  echo "curl: (6) Could not resolve host" >&2; exit 6
fi
f="$FAKE_WEB/${url#https://}"
if [ ! -f "$f" ]; then
  echo "curl: (22) The requested URL returned error: 404" >&2; exit 22
fi
if [ "$out" = - ]; then cat "$f"; else cat "$f" > "$out"; fi
"""

FAKE_WGET = r"""
echo "wget $*" >> "$FAKE_LOG"
out=-; url=""
while [ $# -gt 0 ]; do
  case "$1" in
    -O|-qO) out=$2; shift ;;
    -*) ;;
    *) url=$1 ;;
  esac
  shift
done
if [ "${FAKE_NET_DOWN:-0}" = 1 ]; then exit 4; fi
f="$FAKE_WEB/${url#https://}"
[ -f "$f" ] || exit 8
if [ "$out" = - ]; then cat "$f"; else cat "$f" > "$out"; fi
"""


def ncu_script(version: str) -> str:
    return (
        f"#!{BASH}\n"
        'if [ "$1" = --version ]; then\n'
        '  echo "NVIDIA (R) Nsight Compute Command Line Profiler"\n'
        '  echo "Copyright (c) 2018-2026 NVIDIA Corporation"\n'
        f'  echo "Version {version} (build 36398880) (public-release)"\n'
        "fi\n"
    )


class Sandbox:
    def __init__(self, root: Path):
        self.root = root
        self.bin = root / "fakebin"
        self.tools = root / "tools"
        self.pkgs = root / "pkgs"
        self.web = root / "web"
        self.search_root = root / "opt" / "nvidia" / "nsight-compute"
        self.tmp = root / "tmp"
        self.call_log = root / "calls.log"
        self.install_log = root / "install.log"
        self.os_release = root / "os-release"
        for d in (self.bin, self.tools, self.pkgs, self.web, self.search_root, self.tmp):
            d.mkdir(parents=True)
        for tool in NEEDED_TOOLS + OPTIONAL_TOOLS:
            real = shutil.which(tool)
            if real is None:
                if tool in OPTIONAL_TOOLS:
                    continue
                pytest.skip(f"real tool {tool!r} not found")
            (self.tools / tool).symlink_to(real)
        for name, body in {
            "id": FAKE_ID, "uname": FAKE_UNAME, "apt-get": FAKE_APT_GET, "apt-cache": FAKE_APT_CACHE,
            "dpkg": FAKE_DPKG, "curl": FAKE_CURL,
        }.items():
            self.fake(name, body)
        self.set_os_release("ubuntu", "22.04")
        self.env = {
            "PATH": f"{self.bin}:{self.tools}",
            "LC_ALL": "C",
            "TMPDIR": str(self.tmp),
            "NCU_SEARCH_ROOT": str(self.search_root),
            "NCU_INSTALL_LOG": str(self.install_log),
            "OS_RELEASE_FILE": str(self.os_release),
            "FAKE_ROOT": str(self.root),
            "FAKE_LOG": str(self.call_log),
            "FAKE_PKGS": str(self.pkgs),
            "FAKE_WEB": str(self.web),
        }

    # -- building the fake world
    def fake(self, name: str, body: str) -> None:
        path = self.bin / name
        path.write_text(f"#!{BASH}\n{body}")
        path.chmod(0o755)

    def remove_fake(self, name: str) -> None:
        (self.bin / name).unlink()

    def add_ncu(self, directory: Path, version: str) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "ncu"
        path.write_text(ncu_script(version))
        path.chmod(0o755)
        return path

    def set_os_release(self, os_id: str, version_id: str) -> None:
        self.os_release.write_text(
            f'PRETTY_NAME="{os_id} {version_id}"\nNAME="{os_id}"\n'
            f'VERSION_ID="{version_id}"\nID={os_id}\nID_LIKE=debian\n'
        )

    def add_package(self, version: str, ncu_version: str | None = None) -> Path:
        """A fake nsight-compute-<version> whose install puts ncu launchers under the search root.

        Its `dpkg -L` listing, like the real one, holds directories, per-platform copies of
        ncu (listed first) and the top-level launcher. Returns the top-level launcher's dir.
        """
        pkg = f"nsight-compute-{version}"
        top = self.search_root / version
        launchers = [
            top / "target" / "linux-desktop-glibc_2_11_3-x64" / "ncu",
            top / "host" / "target-linux-x64" / "ncu",
            top / "ncu",
        ]
        listing = [
            "/.", str(self.search_root), str(top), str(top / "target"),
            *map(str, launchers),
            str(top / "ncu-ui"),
            f"/usr/share/doc/{pkg}/copyright",
        ]
        (self.pkgs / f"{pkg}.list").write_text("\n".join(listing) + "\n")
        script = ncu_script(ncu_version or f"{version}.0")
        install = ["set -e"]
        for launcher in launchers:
            install.append(f"mkdir -p '{launcher.parent}'")
            install.append(f"cat > '{launcher}' <<'NCU_EOF'\n{script}NCU_EOF")
            install.append(f"chmod +x '{launcher}'")
        (self.pkgs / f"{pkg}.install").write_text("\n".join(install) + "\n")
        return top

    def serve(self, url: str, content: bytes) -> None:
        assert url.startswith("https://")
        path = self.web / url[len("https://"):]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)

    def serve_repo(self, distro: str, arch: str, debs: dict[str, bytes],
                   extra_stanzas: str = "", sha256: dict[str, str] | None = None) -> str:
        """Serve a Packages index listing each .deb (by file name) and the .debs themselves."""
        base = f"{REPO}/{distro}/{arch}"
        stanzas = [extra_stanzas.strip()] if extra_stanzas.strip() else []
        for name, content in debs.items():
            pkg, ver = name.split("_")[:2]
            digest = (sha256 or {}).get(name, hashlib.sha256(content).hexdigest())
            stanzas.append(
                f"Package: {pkg}\nArchitecture: amd64\nVersion: {ver}\n"
                f"Filename: ./{name}\nSize: {len(content)}\nSHA256: {digest}\n"
                "Description: Nsight Compute\n"
            )
            self.serve(f"{base}/{name}", content)
        self.serve(f"{base}/Packages", ("\n\n".join(s.strip() for s in stanzas) + "\n").encode())
        return base

    # -- running and inspecting
    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [BASH, str(SCRIPT), *args], env={**self.env, **env},
            capture_output=True, text=True, timeout=60,
        )

    def calls(self, name: str | None = None) -> list[str]:
        if not self.call_log.exists():
            return []
        lines = self.call_log.read_text().splitlines()
        return [c for c in lines if name is None or c.split(" ", 1)[0] == name]

    def clear_calls(self) -> None:
        self.call_log.unlink(missing_ok=True)


@pytest.fixture
def sb(tmp_path: Path) -> Sandbox:
    return Sandbox(tmp_path)


def last_line(out: str) -> str:
    lines = out.splitlines()
    assert lines, "nothing on stdout"
    return lines[-1]


# ------------------------------------------------------------------ layout and options

def test_script_is_executable_and_scripts_entry_is_the_same_script():
    """A relative symlink in the repository; an sdist stores it as an identical copy."""
    assert os.access(RESOURCE, os.X_OK)
    if SCRIPT.is_symlink():
        assert os.readlink(SCRIPT) == "../nspy_tutorial/resources/install_ncu.sh"
        assert SCRIPT.resolve() == RESOURCE.resolve()
    else:
        assert SCRIPT.read_bytes() == RESOURCE.read_bytes() and os.access(SCRIPT, os.X_OK)


def test_help_prints_usage_and_exit_codes(sb):
    r = sb.run("--help")
    assert r.returncode == 0
    assert "Usage:" in r.stdout
    for code in ("0", "2", "3", "4", "5", "6", "7"):
        assert any(line.strip().startswith(code + " ") for line in r.stdout.splitlines()), code
    assert "--min-version" in r.stdout and "--dry-run" in r.stdout
    assert sb.calls() == []


def test_unknown_option_is_a_usage_error(sb):
    r = sb.run("--frobnicate")
    assert r.returncode == 2
    assert "unknown option '--frobnicate'" in r.stderr
    assert "Usage:" in r.stderr
    assert r.stdout == ""


def test_malformed_min_version_is_a_usage_error(sb):
    r = sb.run("--min-version", "2026.x")
    assert r.returncode == 2
    assert "bad --min-version" in r.stderr


# ------------------------------------------------------------------ already new enough

def test_new_enough_ncu_on_path_installs_nothing(sb):
    sb.add_ncu(sb.bin, "2026.3.1.0")
    r = sb.run()
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout) == str(sb.bin)
    assert sb.calls("apt-get") == [] and sb.calls("dpkg") == [] and sb.calls("curl") == []
    assert not sb.install_log.exists()


def test_new_enough_ncu_under_search_root_is_found(sb):
    sb.add_ncu(sb.search_root / "2025.1.0", "2025.1.0.0")
    sb.add_ncu(sb.search_root / "2026.2.1", "2026.2.1.0")
    r = sb.run(FAKE_UID="1000")  # no root needed when nothing is installed
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout) == str(sb.search_root / "2026.2.1")
    assert sb.calls("apt-get") == []


def test_newest_qualifying_ncu_wins(sb):
    sb.add_ncu(sb.bin, "2026.2.1.0")
    sb.add_ncu(sb.search_root / "2026.3.1", "2026.3.1.0")
    r = sb.run()
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout) == str(sb.search_root / "2026.3.1")


def test_versions_compare_numerically(sb):
    sb.add_ncu(sb.bin, "2026.10.0.0")
    r = sb.run("--min-version", "2026.9.0")
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout) == str(sb.bin)


def test_old_ncu_on_path_is_not_enough(sb):
    sb.add_ncu(sb.bin, "2025.3.1.0")
    sb.add_package("2026.3.1")
    r = sb.run(FAKE_APT_OK="2026.3.1")
    assert r.returncode == 0, r.stderr
    assert "apt-get -o DPkg::Lock::Timeout=120 install -y -q nsight-compute-2026.3.1" in sb.calls("apt-get")
    assert last_line(r.stdout) == str(sb.search_root / "2026.3.1")


# ------------------------------------------------------------------ refusals before installing

def test_not_root_exits_3(sb):
    sb.add_ncu(sb.bin, "2025.3.1.0")
    r = sb.run(FAKE_UID="1000")
    assert r.returncode == 3
    assert "root" in r.stderr and "sudo" in r.stderr
    assert r.stdout == ""
    assert sb.calls("apt-get") == []


def test_not_root_says_root_is_needed_before_any_word_of_installing(sb):
    sb.add_ncu(sb.bin, "2025.3.1.0")
    r = sb.run(FAKE_UID="1000")
    lines = r.stderr.splitlines()
    first = next(i for i, line in enumerate(lines) if "installing" in line)
    assert "needs root" in lines[first], lines
    assert not any("installing" in line and "needs root" not in line for line in lines), lines


def test_dry_run_as_non_root_says_root_is_needed_before_the_install_plan(sb):
    r = sb.run("--dry-run", FAKE_UID="1000")
    assert r.returncode == 0, r.stderr
    lines = r.stderr.splitlines()
    root = next(i for i, line in enumerate(lines) if "needs root" in line)
    assert all("would run: apt-get" not in line and "would install" not in line for line in lines[:root]), lines


@pytest.mark.parametrize("missing", ["apt-get", "dpkg"])
def test_no_apt_or_dpkg_exits_4(sb, missing):
    sb.remove_fake(missing)
    r = sb.run()
    assert r.returncode == 4
    assert "apt-get/dpkg not found" in r.stderr
    assert r.stdout == ""


def test_unsupported_architecture_exits_7(sb):
    r = sb.run(FAKE_ARCH="ppc64le")
    assert r.returncode == 7
    assert "unsupported architecture 'ppc64le'" in r.stderr
    assert sb.calls("apt-get") == []


# ------------------------------------------------------------------ apt

def test_apt_installs_newest_available_version(sb):
    sb.add_package("2026.3.1")
    top = sb.add_package("2026.2.1")
    r = sb.run(FAKE_APT_OK="2026.2.1")
    assert r.returncode == 0, r.stderr
    assert sb.calls("apt-get") == [
        "apt-get -o DPkg::Lock::Timeout=120 update -q",
        "apt-get -o DPkg::Lock::Timeout=120 install -y -q nsight-compute-2026.3.1",
        "apt-get -o DPkg::Lock::Timeout=120 install -y -q nsight-compute-2026.2.1",
    ]
    assert "dpkg -L nsight-compute-2026.2.1" in sb.calls("dpkg")
    assert last_line(r.stdout) == str(top)  # the shortest of the listed .../ncu paths
    assert sb.calls("curl") == []
    assert "E: Unable to locate package nsight-compute-2026.3.1" in sb.install_log.read_text()


def test_failed_apt_update_still_tries_install(sb):
    top = sb.add_package("2026.3.1")
    r = sb.run(FAKE_APT_OK="2026.3.1", FAKE_APT_UPDATE_RC="100")
    assert r.returncode == 0, r.stderr
    assert "apt-get update failed" in r.stderr
    assert last_line(r.stdout) == str(top)


def test_ncu_versions_env_overrides_and_is_tried_newest_first(sb):
    top = sb.add_package("2026.4.0")
    r = sb.run(NCU_VERSIONS="2026.3.1 2026.4.0", FAKE_APT_OK="2026.4.0 2026.3.1")
    assert r.returncode == 0, r.stderr
    assert sb.calls("apt-get")[1] == "apt-get -o DPkg::Lock::Timeout=120 install -y -q nsight-compute-2026.4.0"
    assert last_line(r.stdout) == str(top)


# ------------------------------------------------------------------ download fallback

DEB_3 = "nsight-compute-2026.3.1_2026.3.1.0-1_amd64.deb"
DEB_2 = "nsight-compute-2026.2.1_2026.2.1.0-1_amd64.deb"
OTHER_STANZAS = """
Package: nsight-compute-2025.3.0
Architecture: amd64
Version: 2025.3.0.0-1
Filename: ./nsight-compute-2025.3.0_2025.3.0.0-1_amd64.deb

Package: nsight-compute-2026.3.10
Architecture: amd64
Version: 2026.3.10.0-1
Filename: ./nsight-compute-2026.3.10_2026.3.10.0-1_amd64.deb
"""


def test_download_fallback_installs_deb_from_repo_index(sb):
    top = sb.add_package("2026.3.1")
    sb.add_package("2026.2.1")
    content = b"!<arch>\nfake nsight-compute 2026.3.1 deb\n"
    base = sb.serve_repo("ubuntu2204", "x86_64", {DEB_2: b"older", DEB_3: content},
                         extra_stanzas=OTHER_STANZAS)
    assert base == f"{REPO}/ubuntu2204/x86_64"
    r = sb.run()  # FAKE_APT_OK unset: apt fails for every version
    assert r.returncode == 0, r.stderr
    curl_urls = [c.split()[-1] for c in sb.calls("curl")]
    assert curl_urls == [f"{base}/Packages", f"{base}/{DEB_3}"]
    deb_installs = [c for c in sb.calls("apt-get") if c.endswith(".deb")]
    assert len(deb_installs) == 1 and not any(c.startswith("dpkg -i") for c in sb.calls("dpkg"))
    deb_arg = Path(deb_installs[0].split()[-1])
    assert deb_arg.name == DEB_3
    assert (sb.root / "dpkg_i_received.deb").read_bytes() == content
    assert last_line(r.stdout) == str(top)
    assert not deb_arg.exists()
    assert list(sb.tmp.iterdir()) == []  # temp dir removed


def test_aarch64_uses_sbsa_repo(sb):
    sb.set_os_release("ubuntu", "24.04")
    top = sb.add_package("2026.3.1")
    deb = "nsight-compute-2026.3.1_2026.3.1.0-1_arm64.deb"
    base = sb.serve_repo("ubuntu2404", "sbsa", {deb: b"arm deb"})
    r = sb.run(FAKE_ARCH="aarch64")
    assert r.returncode == 0, r.stderr
    assert [c.split()[-1] for c in sb.calls("curl")] == [f"{base}/Packages", f"{base}/{deb}"]
    assert base.endswith("/ubuntu2404/sbsa")
    assert last_line(r.stdout) == str(top)


def test_wget_is_used_when_curl_is_missing(sb):
    sb.remove_fake("curl")
    sb.fake("wget", FAKE_WGET)
    top = sb.add_package("2026.3.1")
    base = sb.serve_repo("ubuntu2204", "x86_64", {DEB_3: b"deb"})
    r = sb.run()
    assert r.returncode == 0, r.stderr
    assert [c.split()[-1] for c in sb.calls("wget")] == [f"{base}/Packages", f"{base}/{DEB_3}"]
    assert last_line(r.stdout) == str(top)


def test_no_network_exits_5(sb):
    sb.add_package("2026.3.1")
    r = sb.run(FAKE_NET_DOWN="1")
    assert r.returncode == 5
    assert "no network" in r.stderr and str(sb.install_log) in r.stderr
    assert r.stdout == ""
    assert not any(c.endswith(".deb") for c in sb.calls("apt-get"))
    assert list(sb.tmp.iterdir()) == []


def test_no_curl_or_wget_exits_5(sb):
    sb.remove_fake("curl")
    r = sb.run()
    assert r.returncode == 5
    assert "no network" in r.stderr and "neither curl nor wget" in r.stderr
    assert r.stdout == ""


def test_no_new_enough_package_exits_6(sb):
    sb.serve_repo("ubuntu2204", "x86_64", {}, extra_stanzas=OTHER_STANZAS)
    r = sb.run()
    assert r.returncode == 6
    assert "no nsight-compute package >= 2026.2.1 found" in r.stderr
    assert r.stdout == ""
    assert len(sb.calls("curl")) == 1  # only the index
    assert not any(c.endswith(".deb") for c in sb.calls("apt-get"))


def test_corrupt_download_is_rejected_exits_6(sb):
    sb.add_package("2026.3.1")
    sb.serve_repo("ubuntu2204", "x86_64", {DEB_3: b"tampered"}, sha256={DEB_3: "0" * 64})
    if not (sb.tools / "sha256sum").exists():
        pytest.skip("sha256sum not available")
    r = sb.run()
    assert r.returncode == 6
    assert "corrupt" in r.stderr
    assert not any(c.endswith(".deb") for c in sb.calls("apt-get"))
    assert list(sb.tmp.iterdir()) == []


def test_failed_deb_install_is_rolled_back_and_leaves_no_files(sb):
    sb.add_package("2026.3.1")
    sb.serve_repo("ubuntu2204", "x86_64", {DEB_3: b"deb"})
    r = sb.run(FAKE_DPKG_I_FAIL="1")
    assert r.returncode == 6
    assert "no nsight-compute package >= 2026.2.1 found" in r.stderr
    assert "dpkg -r nsight-compute-2026.3.1" in sb.calls("dpkg")
    assert list(sb.tmp.iterdir()) == []
    assert list(sb.search_root.iterdir()) == []


def test_installed_ncu_too_old_exits_6(sb):
    sb.add_package("2026.3.1", ncu_version="2025.1.0.0")
    r = sb.run(FAKE_APT_OK="2026.3.1")
    assert r.returncode == 6
    assert "reports 2025.1.0.0, older than 2026.2.1" in r.stderr
    assert r.stdout == ""


# ------------------------------------------------------------------ dry run, re-run, options

def test_dry_run_changes_nothing(sb):
    sb.add_ncu(sb.bin, "2025.3.1.0")
    sb.add_package("2026.3.1")
    sb.serve_repo("ubuntu2204", "x86_64", {DEB_3: b"deb"})
    r = sb.run("--dry-run", FAKE_APT_OK="2026.3.1")
    assert r.returncode == 0, r.stderr
    assert r.stdout == ""
    assert "apt-get -o DPkg::Lock::Timeout=120 install -y -q nsight-compute-2026.3.1" in r.stderr
    assert f"{REPO}/ubuntu2204/x86_64/Packages" in r.stderr
    assert sb.calls("apt-get") == [] and sb.calls("dpkg") == [] and sb.calls("curl") == []
    assert not sb.install_log.exists()
    assert list(sb.search_root.iterdir()) == []
    assert list(sb.tmp.iterdir()) == []


def test_dry_run_with_new_enough_ncu_prints_its_dir(sb):
    sb.add_ncu(sb.search_root / "2026.3.1", "2026.3.1.0")
    r = sb.run("--dry-run")
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{sb.search_root / '2026.3.1'}\n"


def test_rerun_after_success_installs_nothing(sb):
    top = sb.add_package("2026.3.1")
    first = sb.run(FAKE_APT_OK="2026.3.1")
    assert first.returncode == 0, first.stderr
    assert last_line(first.stdout) == str(top) == str(sb.search_root / "2026.3.1")
    sb.clear_calls()
    second = sb.run(FAKE_APT_OK="2026.3.1")
    assert second.returncode == 0, second.stderr
    assert last_line(second.stdout) == str(top)
    assert sb.calls("apt-get") == [] and sb.calls("dpkg") == []


def test_min_version_option_is_honoured(sb):
    sb.add_ncu(sb.bin, "2026.2.1.0")
    sb.add_package("2026.2.1")
    top = sb.add_package("2026.3.1")
    r = sb.run("--min-version", "2026.3.1", FAKE_APT_OK="2026.3.1 2026.2.1")
    assert r.returncode == 0, r.stderr
    installs = [c for c in sb.calls("apt-get") if " install " in c]
    assert installs == ["apt-get -o DPkg::Lock::Timeout=120 install -y -q nsight-compute-2026.3.1"]
    assert last_line(r.stdout) == str(top)


def test_lower_min_version_accepts_older_ncu(sb):
    sb.add_ncu(sb.bin, "2025.3.0.0")
    r = sb.run("--min-version=2025.1.0")
    assert r.returncode == 0, r.stderr
    assert last_line(r.stdout) == str(sb.bin)
    assert sb.calls("apt-get") == []


def test_stdout_carries_only_the_directory(sb):
    # The noisiest path: apt fails (chatty), then the download and its apt-get install (chatty too).
    top = sb.add_package("2026.3.1")
    sb.serve_repo("ubuntu2204", "x86_64", {DEB_3: b"deb"})
    r = sb.run()
    assert r.returncode == 0, r.stderr
    assert r.stdout == f"{top}\n"
    assert "    apt: Reading package lists" in r.stderr  # apt's lines: to stderr, marked, and to the log
    assert "Reading package lists" in sb.install_log.read_text()


# ------------------------------------------------------------------ what the reader sees while it works

def test_the_download_size_is_said_before_apt_installs(sb):
    sb.add_package("2026.3.1")
    r = sb.run(FAKE_APT_OK="2026.3.1")
    assert r.returncode == 0, r.stderr
    said = r.stderr.splitlines()
    size = next(i for i, line in enumerate(said) if "downloading 375 MB" in line)
    setting_up = next(i for i, line in enumerate(said) if "apt: Setting up nsight-compute-2026.3.1" in line)
    assert size < setting_up


def test_apt_lines_are_shown_as_they_come_and_kept_in_the_log(sb):
    sb.add_package("2026.3.1")
    r = sb.run(FAKE_APT_OK="2026.3.1")
    assert "    apt: Setting up nsight-compute-2026.3.1 ..." in r.stderr
    assert "Setting up nsight-compute-2026.3.1 ..." in sb.install_log.read_text()


def test_the_download_fallback_says_its_size(sb):
    sb.add_package("2026.3.1")
    sb.serve_repo("ubuntu2204", "x86_64", {DEB_3: b"x" * 3_000_000})
    r = sb.run()
    assert r.returncode == 0, r.stderr
    assert f"downloading {REPO}/ubuntu2204/x86_64/{DEB_3} (3 MB; usually a minute or two)" in r.stderr


def test_apt_runs_non_interactively_and_waits_for_a_held_lock(sb):
    sb.add_package("2026.3.1")
    sb.run(FAKE_APT_OK="2026.3.1")
    installs = [c for c in sb.calls("apt-get") if " install " in c]
    assert installs and all("-o DPkg::Lock::Timeout=120" in c and " -y " in c for c in installs)


def test_a_held_dpkg_lock_is_reported_as_such_with_exit_8(sb):
    sb.add_package("2026.3.1")
    r = sb.run(FAKE_APT_OK="2026.3.1", FAKE_APT_LOCKED="1")
    assert r.returncode == 8
    assert "the dpkg lock is held by another process (held by process 4242 (apt-get))" in r.stderr
    assert r.stdout == ""
