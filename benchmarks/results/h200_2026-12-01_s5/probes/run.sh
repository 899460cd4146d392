cd .gpu_probe
export PYTHONPATH=$PWD/..:/tmp/site
SAN=$(ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || which compute-sanitizer); NCU=$(which ncu)
echo SAN=$SAN NCU=$NCU; $SAN --version | tail -2
mkdir -p $OUT/m
for mode in none default netsig tmp; do
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 $SAN --tool memcheck --print-limit 5 --log-file $OUT/m/$mode.txt python3 bad.py $mode bad > $OUT/m/$mode.stdout 2>&1; echo "rc=$?"
  echo "== memcheck $mode"; tail -3 $OUT/m/$mode.stdout; grep -c "Invalid __global__" $OUT/m/$mode.txt; tail -2 $OUT/m/$mode.txt
done
echo "== memcheck under launcher"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 python3 -I -S ../egg_mcp/sandbox/launch.py -- $SAN --tool memcheck --print-limit 5 --log-file $OUT/m/ns.txt python3 bad.py default bad > $OUT/m/ns.stdout 2>&1; echo rc=$?; tail -3 $OUT/m/ns.stdout; grep -c "Invalid __global__" $OUT/m/ns.txt; tail -2 $OUT/m/ns.txt
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 python3 -I -S ../egg_mcp/sandbox/launch.py -- $SAN --tool memcheck --print-limit 5 --log-file $OUT/m/ns_none.txt python3 bad.py none bad > $OUT/m/ns_none.stdout 2>&1; echo rc=$?; tail -3 $OUT/m/ns_none.stdout; grep -c "Invalid __global__" $OUT/m/ns_none.txt
echo "== stdout-only memcheck default"
PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 $SAN --tool memcheck --print-limit 5 python3 bad.py default bad 2>&1 | tail -8
for mode in default; do
  echo "== ncu $mode"
  timeout 120 $NCU --clock-control none --metrics gpu__time_duration.sum --csv python3 bad.py $mode good > $OUT/ncu_$mode.txt 2>&1; echo rc=$?; grep -c '"k"' $OUT/ncu_$mode.txt; grep '"k"' $OUT/ncu_$mode.txt | cut -c1-200
done
echo "== fma"; python3 fma.py $OUT/clocks.csv 2>&1 | tail -30; sort $OUT/clocks.csv | uniq -c | sort -rn | head -12
