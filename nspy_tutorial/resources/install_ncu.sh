#!/usr/bin/env bash
# install_ncu.sh - make sure an NVIDIA Nsight Compute CLI (ncu) >= a minimum version is
# available, installing one beside whatever the system already has if needed.
#
# nsight-python 1.1 needs ncu >= 2026.2.1. Some images (Google Colab, for one) ship an
# older ncu but carry NVIDIA's CUDA apt repository, so a newer nsight-compute-<version>
# package installs next to the old one under /opt/nvidia/nsight-compute/<version>/.
#
# Output contract: stdout carries only one line, the directory holding a new-enough `ncu`
# (nothing on stdout for a --dry-run that would install). Every human message goes to
# stderr. Re-runnable: once installed, later runs find the new ncu and install nothing.
#
# Exit codes:
#   0  ok: a new-enough ncu exists (its directory is printed), or --dry-run finished
#   2  usage error (unknown option, malformed version, unwritable log file)
#   3  not root: installing needs root (run as root or with sudo)
#   4  no apt-get/dpkg on PATH (only Debian/Ubuntu systems are supported)
#   5  no network: NVIDIA's package index could not be fetched (or no curl/wget)
#   6  no nsight-compute package >= the minimum version could be installed
#   7  unsupported CPU architecture (only x86_64 and aarch64)
#   8  the dpkg lock is held by another process (e.g. an automatic update): wait, then run again
#   1  anything else (an unexpected failure; see the log)
#
# What it says while it works: the download size before it starts, then apt's own lines as they
# come (also kept in the log). apt runs non-interactively, each call under a timeout, waiting up to
# two minutes for a dpkg lock another process holds.
#
# Environment:
#   NCU_VERSIONS     versions to try, space separated (default "2026.3.1 2026.2.1");
#                    tried newest first, those older than the minimum are skipped
#   NCU_SEARCH_ROOT  where versioned installs live (default /opt/nvidia/nsight-compute)
#   NCU_INSTALL_LOG  log of apt/dpkg/download output (default /tmp/nspy_ncu_install.log)
#   NCU_REPO_BASE    CUDA repo base URL
#                    (default https://developer.download.nvidia.com/compute/cuda/repos)
#   OS_RELEASE_FILE  os-release file naming the distro (default /etc/os-release)
#   NCU_APT_TIMEOUT  seconds allowed for each apt-get call (default 900)

set -euo pipefail

readonly PROG=install_ncu.sh
readonly DEFAULT_MIN_VERSION=2026.2.1
readonly DEFAULT_VERSIONS="2026.3.1 2026.2.1"

MIN_VERSION=$DEFAULT_MIN_VERSION
DRY_RUN=0
VERSIONS_RAW=${NCU_VERSIONS:-$DEFAULT_VERSIONS}
SEARCH_ROOT=${NCU_SEARCH_ROOT:-/opt/nvidia/nsight-compute}
LOG=${NCU_INSTALL_LOG:-/tmp/nspy_ncu_install.log}
REPO_BASE=${NCU_REPO_BASE:-https://developer.download.nvidia.com/compute/cuda/repos}
REPO_BASE=${REPO_BASE%/}
OS_RELEASE=${OS_RELEASE_FILE:-/etc/os-release}
APT_TIMEOUT=${NCU_APT_TIMEOUT:-900}
TMP_DIR=""

usage() {
    cat <<EOF
Usage: $PROG [--min-version X.Y.Z[.W]] [--dry-run] [--help]

Make sure NVIDIA Nsight Compute (ncu) >= the minimum version is available. If neither
the ncu on PATH nor any \$NCU_SEARCH_ROOT/*/ncu is new enough, install the package
nsight-compute-<version> with apt-get, or else download it from NVIDIA's CUDA
repository and install it with dpkg. Installing needs root.

The directory holding the new-enough ncu is printed as the last line of stdout;
all other messages go to stderr.

Options:
  --min-version V  minimum acceptable ncu version (default $DEFAULT_MIN_VERSION)
  --dry-run        say what would be installed and run; change nothing
  -h, --help       show this help and exit

Environment:
  NCU_VERSIONS     versions to try, newest first (default "$DEFAULT_VERSIONS")
  NCU_SEARCH_ROOT  where versioned installs live (default /opt/nvidia/nsight-compute)
  NCU_INSTALL_LOG  log of apt/dpkg/download output (default /tmp/nspy_ncu_install.log)
  NCU_REPO_BASE    CUDA repo base URL
                   (default https://developer.download.nvidia.com/compute/cuda/repos)
  OS_RELEASE_FILE  os-release file naming the distro (default /etc/os-release)
  NCU_APT_TIMEOUT  seconds allowed for each apt-get call (default 900)

Exit codes:
  0  ok: a new-enough ncu exists (its directory is printed), or --dry-run finished
  2  usage error (unknown option, malformed version, unwritable log file)
  3  not root: installing needs root (run as root or with sudo)
  4  no apt-get/dpkg on PATH (only Debian/Ubuntu systems are supported)
  5  no network: NVIDIA's package index could not be fetched (or no curl/wget)
  6  no nsight-compute package >= the minimum version could be installed
  7  unsupported CPU architecture (only x86_64 and aarch64)
  8  the dpkg lock is held by another process: wait for it to finish, then run again
  1  anything else (an unexpected failure; see the log)
EOF
}

say() { printf '%s: %s\n' "$PROG" "$*" >&2; }

die() {  # die CODE MESSAGE...
    local code=$1
    shift
    say "$*"
    exit "$code"
}

usage_error() {
    say "$*"
    usage >&2
    exit 2
}

cleanup() {
    if [[ -n $TMP_DIR && -d $TMP_DIR ]]; then
        rm -rf -- "$TMP_DIR"
    fi
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

is_version() { [[ $1 =~ ^[0-9]+(\.[0-9]+){2,3}$ ]]; }

version_ge() {  # version_ge A B: succeed if A >= B, comparing dot-separated numbers
    local -a a b
    local i n x y
    IFS=. read -r -a a <<<"$1"
    IFS=. read -r -a b <<<"$2"
    n=${#a[@]}
    if ((${#b[@]} > n)); then n=${#b[@]}; fi
    for ((i = 0; i < n; i++)); do
        x=$((10#${a[i]:-0}))
        y=$((10#${b[i]:-0}))
        if ((x > y)); then return 0; fi
        if ((x < y)); then return 1; fi
    done
    return 0
}

ncu_version() {  # ncu_version PATH: print the version `PATH --version` reports
    local out v
    if command -v timeout >/dev/null 2>&1; then
        out=$(timeout 60 "$1" --version 2>/dev/null) || return 1
    else
        out=$("$1" --version 2>/dev/null) || return 1
    fi
    v=$(sed -nE 's/.*Version ([0-9]+(\.[0-9]+)+).*/\1/p' <<<"$out")
    v=${v%%$'\n'*}
    [[ -n $v ]] || return 1
    printf '%s\n' "$v"
}

apt() {  # apt ARGS...: apt-get, non-interactive, under a timeout; its lines to stderr and the log
    local status
    if command -v timeout >/dev/null 2>&1; then
        set +e
        timeout "$APT_TIMEOUT" apt-get -o DPkg::Lock::Timeout=120 "$@" 2>&1 | tee -a "$LOG" | sed 's/^/    apt: /' >&2
        status=${PIPESTATUS[0]}
        set -e
    else
        set +e
        apt-get -o DPkg::Lock::Timeout=120 "$@" 2>&1 | tee -a "$LOG" | sed 's/^/    apt: /' >&2
        status=${PIPESTATUS[0]}
        set -e
    fi
    if ((status == 124)); then say "apt-get $1 ran over $APT_TIMEOUT s and was stopped (NCU_APT_TIMEOUT)"; fi
    if grep -q "Could not get lock" "$LOG" 2>/dev/null; then
        die 8 "the dpkg lock is held by another process ($(grep -m1 -o 'held by process [0-9]* ([^)]*)' "$LOG" || echo 'see the log')): wait for it to finish (on Colab, an automatic apt run), then run this again; details in $LOG"
    fi
    return "$status"
}

megabytes() {  # megabytes BYTES: "N MB"
    printf '%s MB' "$(( ($1 + 524288) / 1048576 ))"
}

# ---------------------------------------------------------------- options
while (($# > 0)); do
    case $1 in
        -h | --help)
            usage
            exit 0
            ;;
        --dry-run)
            DRY_RUN=1
            ;;
        --min-version)
            (($# >= 2)) || usage_error "--min-version needs a value, e.g. --min-version $DEFAULT_MIN_VERSION"
            MIN_VERSION=$2
            shift
            ;;
        --min-version=*)
            MIN_VERSION=${1#*=}
            ;;
        *)
            usage_error "unknown option '$1'"
            ;;
    esac
    shift
done

is_version "$MIN_VERSION" ||
    usage_error "bad --min-version '$MIN_VERSION': expected X.Y.Z or X.Y.Z.W, e.g. $DEFAULT_MIN_VERSION"

# Versions to try: validated, newest first, none older than the minimum.
read -r -a requested <<<"$VERSIONS_RAW"
((${#requested[@]} > 0)) || usage_error "NCU_VERSIONS is empty: list versions to try, e.g. NCU_VERSIONS=\"$DEFAULT_VERSIONS\""
for v in "${requested[@]}"; do
    is_version "$v" || usage_error "bad version '$v' in NCU_VERSIONS: expected X.Y.Z or X.Y.Z.W"
done
VERSIONS=()
while IFS= read -r v; do
    [[ -n $v ]] || continue
    if version_ge "$v" "$MIN_VERSION"; then VERSIONS+=("$v"); fi
done < <(printf '%s\n' "${requested[@]}" | sort -t. -u -k1,1nr -k2,2nr -k3,3nr -k4,4nr)

# ---------------------------------------------------------------- already new enough?
best_dir=""
best_ver=""
consider() {  # consider PATH: remember it if it is the newest qualifying ncu so far
    local path=$1 v
    [[ -f $path && -x $path ]] || return 0
    if ! v=$(ncu_version "$path"); then
        say "ignoring $path: '$path --version' did not report a version"
        return 0
    fi
    if ! version_ge "$v" "$MIN_VERSION"; then
        say "found ncu $v at $path: older than $MIN_VERSION"
        return 0
    fi
    if [[ -z $best_ver ]] || ! version_ge "$best_ver" "$v"; then
        best_ver=$v
        best_dir=$(dirname -- "$path")
    fi
}

if path_ncu=$(command -v ncu 2>/dev/null) && [[ $path_ncu == */* ]]; then
    consider "$path_ncu"
fi
shopt -s nullglob
for candidate in "$SEARCH_ROOT"/*/ncu; do
    consider "$candidate"
done
shopt -u nullglob

if [[ -n $best_dir ]]; then
    say "ncu $best_ver in $best_dir is new enough (>= $MIN_VERSION); nothing to install"
    printf '%s\n' "$best_dir"
    exit 0
fi

# ---------------------------------------------------------------- install
# A real run says "installing" only once nothing stops it (architecture, root, apt, versions).
none_found="no ncu >= $MIN_VERSION found (looked at PATH and $SEARCH_ROOT/*/ncu)"
if ((DRY_RUN)); then say "$none_found"; fi

machine=$(uname -m)
case $machine in
    x86_64) repo_arch=x86_64 ;;
    aarch64 | arm64) repo_arch=sbsa ;;
    *) repo_arch="" ;;
esac

distro=""
if [[ -r $OS_RELEASE ]]; then
    os_id=$(sed -nE 's/^ID="?([^"]*)"?[[:space:]]*$/\1/p' "$OS_RELEASE")
    os_ver=$(sed -nE 's/^VERSION_ID="?([^"]*)"?[[:space:]]*$/\1/p' "$OS_RELEASE")
    os_id=${os_id%%$'\n'*}
    os_ver=${os_ver%%$'\n'*}
    if [[ -n $os_id && -n $os_ver ]]; then distro=${os_id}${os_ver//./}; fi
fi
repo_url=""
if [[ -n $distro && -n $repo_arch ]]; then repo_url="$REPO_BASE/$distro/$repo_arch"; fi

if ((DRY_RUN)); then
    say "dry run: nothing will be changed"
    if [[ -z $repo_arch ]]; then
        say "dry run: a real run would stop: unsupported architecture '$machine' (exit 7)"
    fi
    if [[ $(id -u) != 0 ]]; then
        say "dry run: a real run would stop: installing needs root; run as root or with sudo (exit 3)"
    fi
    if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
        say "dry run: a real run would stop: apt-get/dpkg not on PATH (exit 4)"
    fi
    if ((${#VERSIONS[@]} == 0)); then
        say "dry run: NCU_VERSIONS ($VERSIONS_RAW) lists no version >= $MIN_VERSION; a real run would exit 6"
        exit 0
    fi
    say "dry run: would run: apt-get -o DPkg::Lock::Timeout=120 update -q   (its lines shown and kept in $LOG)"
    for v in "${VERSIONS[@]}"; do
        say "dry run: would run: apt-get -o DPkg::Lock::Timeout=120 install -y -q nsight-compute-$v   (first success wins)"
    done
    if [[ -n $repo_url ]]; then
        say "dry run: if apt fails: would fetch $repo_url/Packages, download the first of" \
            "${VERSIONS[*]/#/nsight-compute-} listed there and run: apt-get install -y ./<that .deb>"
    else
        say "dry run: if apt fails: no download fallback (distro from $OS_RELEASE or architecture unknown)"
    fi
    say "dry run: then would locate ncu with: dpkg -L nsight-compute-<version>, and check its version"
    exit 0
fi

[[ -n $repo_arch ]] ||
    die 7 "$none_found; unsupported architecture '$machine': Nsight Compute packages exist only for x86_64 and aarch64; use such a machine, or install ncu >= $MIN_VERSION by hand"

[[ $(id -u) == 0 ]] ||
    die 3 "$none_found; installing one needs root: run as root or with sudo (sudo bash $0)"

if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg >/dev/null 2>&1; then
    die 4 "$none_found; apt-get/dpkg not found on PATH: only Debian/Ubuntu are supported; install Nsight Compute >= $MIN_VERSION by hand from https://developer.nvidia.com/tools-overview/nsight-compute/get-started"
fi

((${#VERSIONS[@]} > 0)) ||
    die 6 "no nsight-compute package >= $MIN_VERSION found: NCU_VERSIONS ($VERSIONS_RAW) lists none that new; set NCU_VERSIONS to newer versions"

{ printf '== %s: installing ncu >= %s (%s)\n' "$PROG" "$MIN_VERSION" "${VERSIONS[*]}" >"$LOG"; } 2>/dev/null ||
    usage_error "cannot write the log file $LOG: set NCU_INSTALL_LOG to a writable path"

say "$none_found; installing one"
export DEBIAN_FRONTEND=noninteractive

installed_pkg=""

# 1. apt, from whatever repositories the system has (Colab carries NVIDIA's CUDA repo).
say "trying apt-get (its lines below, and in $LOG)"
if ! apt update -q; then
    say "apt-get update failed; trying the package lists already present"
fi
for v in "${VERSIONS[@]}"; do
    size=""
    if command -v apt-cache >/dev/null 2>&1; then
        size=$(apt-cache show --no-all-versions "nsight-compute-$v" 2>/dev/null | sed -n 's/^Size: //p' | head -n 1) || size=""
    fi
    if [[ $size =~ ^[0-9]+$ ]]; then
        say "nsight-compute-$v: downloading $(megabytes "$size"), then unpacking it; this usually takes a minute or two"
    fi
    if apt install -y -q "nsight-compute-$v"; then
        installed_pkg="nsight-compute-$v"
        say "installed $installed_pkg with apt-get"
        break
    fi
    say "apt-get could not install nsight-compute-$v"
done

# 2. Download fallback: the .deb straight from NVIDIA's CUDA repository.
fetch() {  # fetch URL [FILE]: download URL to FILE (or stdout); output of the tool to the log
    local url=$1 out=${2:--}
    if [[ $fetcher == curl ]]; then
        if [[ $out == - ]]; then curl -fsSL "$url" 2>>"$LOG"; else curl -fsSL -o "$out" "$url" 2>>"$LOG"; fi
    else
        wget -qO "$out" "$url" 2>>"$LOG"
    fi
}

index_entry() {  # index_entry INDEX PACKAGE: print "version<TAB>filename<TAB>sha256<TAB>size" of its newest stanza
    awk -v want="$2" '
        BEGIN { RS = ""; FS = "\n" }
        {
            pkg = ""; ver = ""; file = ""; sha = ""; size = ""
            for (i = 1; i <= NF; i++) {
                line = $i
                sub(/[ \t\r]+$/, "", line)
                if (line ~ /^Package: /) pkg = substr(line, 10)
                else if (line ~ /^Version: /) ver = substr(line, 10)
                else if (line ~ /^Filename: /) file = substr(line, 11)
                else if (line ~ /^SHA256: /) sha = substr(line, 9)
                else if (line ~ /^Size: /) size = substr(line, 7)
            }
            if (pkg == want && file != "") printf "%s\t%s\t%s\t%s\n", ver, file, sha, size
        }' "$1" | sort -t $'\t' -k1,1V | tail -n 1
}

if [[ -z $installed_pkg ]]; then
    if [[ -z $repo_url ]]; then
        die 6 "no nsight-compute package >= $MIN_VERSION found with apt-get, and no download fallback: cannot tell the distro from $OS_RELEASE; add NVIDIA's CUDA apt repository and re-run (details in $LOG)"
    fi
    if command -v curl >/dev/null 2>&1; then
        fetcher=curl
    elif command -v wget >/dev/null 2>&1; then
        fetcher=wget
    else
        die 5 "no network: apt-get could not install nsight-compute and neither curl nor wget is installed to download it; install curl (apt-get install -y curl) and re-run"
    fi

    TMP_DIR=$(mktemp -d "${TMPDIR:-/tmp}/nspy_ncu.XXXXXX")
    index="$TMP_DIR/Packages"
    say "apt-get failed; downloading from $repo_url/ instead"
    printf '== fetching %s/Packages with %s\n' "$repo_url" "$fetcher" >>"$LOG"
    fetch "$repo_url/Packages" "$index" ||
        die 5 "no network: could not fetch $repo_url/Packages (check the connection or proxy, or set NCU_REPO_BASE to a reachable mirror; NVIDIA may also have no repository for $distro/$repo_arch); details in $LOG"

    listed=0
    for v in "${VERSIONS[@]}"; do
        pkg="nsight-compute-$v"
        entry=$(index_entry "$index" "$pkg")
        [[ -n $entry ]] || continue
        listed=1
        IFS=$'\t' read -r _ filename sha256 size <<<"$entry"
        filename=${filename#./}
        deb_name=${filename##*/}
        if [[ -z $deb_name || $filename == /* || $filename == *..* || $deb_name != *.deb ]]; then
            say "ignoring $pkg: odd Filename '$filename' in the index"
            continue
        fi
        deb="$TMP_DIR/$deb_name"
        if [[ $size =~ ^[0-9]+$ ]]; then
            say "downloading $repo_url/$filename ($(megabytes "$size"); usually a minute or two)"
        else
            say "downloading $repo_url/$filename"
        fi
        printf '== downloading %s/%s\n' "$repo_url" "$filename" >>"$LOG"
        if ! fetch "$repo_url/$filename" "$deb"; then
            say "download of $pkg failed (details in $LOG)"
            rm -f -- "$deb"
            continue
        fi
        if [[ -n $sha256 ]] && command -v sha256sum >/dev/null 2>&1; then
            got=$(sha256sum -- "$deb")
            got=${got%% *}
            if [[ $got != "$sha256" ]]; then
                say "download of $pkg is corrupt (sha256 $got, index says $sha256)"
                printf '== sha256 mismatch for %s: got %s, expected %s\n' "$deb_name" "$got" "$sha256" >>"$LOG"
                rm -f -- "$deb"
                continue
            fi
        fi
        was_known=0
        if dpkg -s "$pkg" >/dev/null 2>&1; then was_known=1; fi
        if apt install -y -q "$deb"; then  # apt-get, not dpkg -i: it installs the .deb's dependencies too
            installed_pkg=$pkg
            say "installed $pkg from the downloaded .deb with apt-get"
            break
        fi
        say "apt-get install of the downloaded $deb_name failed (details in $LOG)"
        if ((!was_known)); then
            # Leave nothing half-installed behind.
            dpkg -r "$pkg" >>"$LOG" 2>&1 || true
        fi
        rm -f -- "$deb"
    done

    if [[ -z $installed_pkg ]]; then
        if ((listed)); then
            die 6 "no nsight-compute package >= $MIN_VERSION found that installs: download or install failed for every listed version (${VERSIONS[*]}); details in $LOG"
        fi
        die 6 "no nsight-compute package >= $MIN_VERSION found in apt or in $repo_url/Packages (tried ${VERSIONS[*]}); add NVIDIA's CUDA apt repository or set NCU_VERSIONS to versions it lists; details in $LOG"
    fi
fi

# ---------------------------------------------------------------- locate and check
listing=$(dpkg -L "$installed_pkg" 2>>"$LOG") || listing=""
launcher=""
while IFS= read -r p; do
    [[ $p == */ncu && -f $p && -x $p ]] || continue
    if [[ -z $launcher || ${#p} -lt ${#launcher} ]]; then launcher=$p; fi
done <<<"$listing"

[[ -n $launcher ]] ||
    die 6 "installed $installed_pkg but 'dpkg -L $installed_pkg' lists no ncu launcher; reinstall it (apt-get install --reinstall $installed_pkg); details in $LOG"

got_ver=$(ncu_version "$launcher") ||
    die 6 "installed $installed_pkg but '$launcher --version' fails; check $LOG and the package's dependencies"

version_ge "$got_ver" "$MIN_VERSION" ||
    die 6 "installed $installed_pkg but its ncu ($launcher) reports $got_ver, older than $MIN_VERSION; set NCU_VERSIONS to newer versions"

ncu_dir=$(dirname -- "$launcher")
say "ncu $got_ver installed in $ncu_dir (use it with: export PATH=\"$ncu_dir:\$PATH\")"
printf '%s\n' "$ncu_dir"
