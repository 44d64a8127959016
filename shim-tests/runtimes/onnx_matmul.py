"""Tiny in-memory ONNX MLP (MatMul+Relu x LAYERS) run with onnxruntime, 2 intra-op threads, for
shim-tests/tests/placement/real_runtimes.rs: about 3 s on 2 CPUs. Prints exactly one line on
stdout, the same whatever the timing (rounded below)."""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper
import onnxruntime as ort

B, D, LAYERS, ITERS = 256, 1024, 4, 80

rng = np.random.default_rng(2024)
inits, nodes, prev = [], [], "x"
for i in range(LAYERS):
    w = (rng.standard_normal((D, D)) * np.sqrt(2.0 / D)).astype(np.float32)
    inits.append(numpy_helper.from_array(w, name=f"w{i}"))
    nodes.append(helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"]))
    nodes.append(helper.make_node("Relu", [f"m{i}"], [f"r{i}"]))
    prev = f"r{i}"
graph = helper.make_graph(
    nodes, "mlp",
    [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, D])],
    [helper.make_tensor_value_info(prev, TensorProto.FLOAT, [B, D])],
    initializer=inits)
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
model.ir_version = 8          # accepted by any recent onnxruntime
onnx.checker.check_model(model)

so = ort.SessionOptions()
so.intra_op_num_threads = 2
so.inter_op_num_threads = 1
so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
so.log_severity_level = 3
sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

x = rng.standard_normal((B, D)).astype(np.float32)
acc = 0.0
for it in range(ITERS):
    (y,) = sess.run(None, {"x": x})
    acc += float(y.astype(np.float64).sum())
# GEMM blocking may change float summation order slightly: round to 6 significant digits.
print(f"onnx_matmul b={B} d={D} layers={LAYERS} iters={ITERS} checksum={acc:.5e}")
