"""ONNX Runtime InferenceSession on a one-node MatMul graph (fp32, SIZE x SIZE, default 2048)
built with the onnx helper (or read from matmul.onnx without it; `--save` writes that file).
Intra-op threads: ORT_THREADS when set (run.sh sets it to -n, the
table's "N intra-op threads"), else ONNX Runtime's default."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

(ort, np) = _timed.need(["onnxruntime", "numpy"], "ONNX Runtime")

n = int(os.environ.get("SIZE", "2048"))
# The same graph, saved (matmul.onnx, 2048 x 2048) for a machine without the onnx package.
saved = os.path.join(os.path.dirname(os.path.abspath(__file__)), "matmul.onnx")
try:
    from onnx import TensorProto, helper

    A = helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])
    B = helper.make_tensor_value_info("B", TensorProto.FLOAT, [n, n])
    C = helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])
    graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["C"])], "mm", [A, B], [C])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 8)
    model_bytes = model.SerializeToString()
    if "--save" in sys.argv[1:]:
        with open(saved, "wb") as f:
            f.write(model_bytes)
        sys.exit(0)
except ImportError:
    if n != 2048:
        print("skip: ONNX Runtime: SIZE other than 2048 needs the onnx package")
        sys.exit(_timed.SKIP)
    with open(saved, "rb") as f:
        model_bytes = f.read()

so = ort.SessionOptions()
threads = int(os.environ.get("ORT_THREADS", "0"))
so.intra_op_num_threads = threads
sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
feed = {"A": _timed.int_matrix(np, n, 1, np.float32), "B": _timed.int_matrix(np, n, 2, np.float32)}
out = [None]


def op():
    out[0] = sess.run(None, feed)[0]


_timed.run(op, lambda: out[0].sum(dtype=np.float64), threads or sess.get_session_options().intra_op_num_threads)
