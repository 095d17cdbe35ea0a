#!/usr/bin/env bash
# The transport study (docs/study.md), end to end, from a clean checkout (as root: emulated hosts):
#   bash launchers/study.sh            # 35-60 minutes on a 2-core VM, by its pace
# 1. latency and bandwidth sweeps: tcp, grpc raw, grpc proto, grpc-cpp, mpi, tf-grpc (loopback)
# 2. ps-throughput (what TF's PS training sends: a chief, W workers, P PS) with resnet50 gradients:
#    1-2 workers x 1-2 PS, tcp and grpc
# 3. launchers/predict.sh: TF's runtime calibrated once on small_cnn, then small_cnn and mobilenet_v2,
#    ps and mirrored, trained over emulated links at 200mbit, 500mbit, 1gbit and unshaped (and W=3)
#    and predicted from a p2p sweep over the same links and that calibration only
# 4. commbench report -> docs/study/ (PNGs + report.md), pasted between the study markers in docs/study.md
# Results files stay in study-results/ (STUDY_RESULTS=dir to change). QUICK=1 shortens every run;
# REPORT_ONLY=1 redoes step 4 from the results files already there.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "launchers/study.sh: needs root (commbench hosts up); run it with sudo" >&2; exit 2; }
bash launchers/setup.sh --dev >/dev/null
CB=".venv/bin/commbench"
R=${STUDY_RESULTS:-study-results}
OUT=docs/study
if [ "${REPORT_ONLY:-0}" != 1 ]; then rm -rf "$R"; fi
mkdir -p "$R" "$OUT"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OPAL_PREFIX="$PWD/.venv"
if [ "${QUICK:-0}" = 1 ]; then LAT="-i 100 -x 10"; BW="-i 5 -x 1"; PSI="-i 5"; else
  LAT="-i 1000 -x 100"; BW="-i 20 -x 2"; PSI="-i 20"; fi
trap '$CB hosts down >/dev/null 2>&1 || true' EXIT

step() { echo "== $*" >&2; }

if [ "${REPORT_ONLY:-0}" != 1 ]; then
step "1. latency and bandwidth on loopback"
declare -A T=([tcp]="-t tcp" [grpc-raw]="-t grpc --grpc-mode raw --grpc-call unary" [grpc-proto]="-t grpc --grpc-mode proto --grpc-call unary"
              [grpc-cpp]="-t grpc-cpp --grpc-call unary" [mpi]="-t mpi" [tf-grpc]="-t tf-grpc")
for name in tcp grpc-raw grpc-proto grpc-cpp mpi tf-grpc; do
  if [ "$name" = mpi ]; then launch=(.venv/bin/mpiexec -n 2 "$CB"); else launch=("$CB"); fi
  # shellcheck disable=SC2086
  "${launch[@]}" p2p-latency ${T[$name]} -m 8:4M $LAT -o "$R/latency.jsonl" >/dev/null
  # shellcheck disable=SC2086
  "${launch[@]}" p2p-bandwidth ${T[$name]} -m 1K:4M $BW -o "$R/bandwidth.jsonl" >/dev/null
done

step "2. parameter-server throughput, resnet50 gradients"
for t in "tcp" "grpc --grpc-call unary"; do for w in 1 2; do for p in 1 2; do
  # shellcheck disable=SC2086
  $CB ps-throughput -t $t --workers "$w" --ps "$p" --payload resnet50 $PSI -o "$R/ps.jsonl" >/dev/null
done; done; done

step "3. training predicted out of sample: launchers/predict.sh"
rm -rf "$R/predict"
OUT="$R/predict" CB="$CB" QUICK="${QUICK:-0}" REPEATS="${REPEATS:-1}" bash launchers/predict.sh  # one run per shape: the study is long
$CB hosts down >/dev/null
fi

step "4. report"
$CB report "$R"/latency.jsonl "$R"/bandwidth.jsonl "$R"/ps.jsonl "$R"/predict/predict.jsonl -o "$OUT" --format md
python3 - "$OUT/report.md" <<'EOF'
import re, sys
from pathlib import Path
page = Path(sys.argv[1]).read_text().replace("](", "](study/").replace("# commbench report", "### Runs", 1)
page = page.replace("\n## ", "\n#### ")
readme = Path("docs/study.md")
text = readme.read_text()
begin, end = "<!-- study:begin (launchers/study.sh writes this part) -->", "<!-- study:end -->"
text = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: f"{begin}\n{page}\n{end}", text, flags=re.S)
readme.write_text(text)
EOF
echo "study: results in $R/, figures and report.md in $OUT/, docs/study.md updated" >&2
