# golden_ids FIXTURE_DIR NAME: an I32 tensor of a fixture's
# golden.safetensors as "a,b,c" (sourced by cluster_lib.sh and the tests
# that run without a cluster).
golden_ids() {
    python3 - "$1/golden.safetensors" "$2" <<'EOF'
import json, struct, sys
data = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", data[:8])[0]
entry = json.loads(data[8:8 + n])[sys.argv[2]]
assert entry["dtype"] == "I32"
b, e = entry["data_offsets"]
raw = data[8 + n + b:8 + n + e]
print(",".join(str(v) for v in struct.unpack("<%di" % (len(raw) // 4), raw)))
EOF
}

