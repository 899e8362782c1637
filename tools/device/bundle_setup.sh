# Sourced by the one-bundle device scripts (decode_kernels.sh,
# step_profile.sh) after they set BUNDLE and out: unpacks the carried
# .bundle-x/<name>.tar.xz archives (python3's tarfile reads .tar.xz whether
# or not the host has xz), sources the bundle's env, sets B to its bin/,
# records the GPU and its clocks in $out/gpu.txt, and sets m to the folder
# of the GLM-5-geometry checkpoint (in /dev/shm when it has room).
for z in .bundle-x/*.tar.xz; do
  [[ -f $z && ! -d .bundle-$(basename "$z" .tar.xz) ]] || continue
  python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(".")' "$z"
done
source "$BUNDLE/env.sh"
B=$BUNDLE/bin
export SPAR_SOURCE_DIR=$PWD PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$out/gpu.txt"
m=/tmp/glm5full
[[ $(df --output=avail -B1G /dev/shm 2>/dev/null | tail -1) -gt 60 ]] && m=/dev/shm/glm5full
