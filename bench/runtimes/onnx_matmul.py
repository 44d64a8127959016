"""ONNX Runtime InferenceSession on a one-node MatMul graph (fp32, SIZE x SIZE, default 2048)
built with the onnx helper. Intra-op threads: ORT_THREADS when set (run.sh sets it to -n, the
table's "N intra-op threads"), else ONNX Runtime's default."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _timed

(ort, onnx, np) = _timed.need(["onnxruntime", "onnx", "numpy"], "ONNX Runtime")
from onnx import TensorProto, helper

n = int(os.environ.get("SIZE", "2048"))
A = helper.make_tensor_value_info("A", TensorProto.FLOAT, [n, n])
B = helper.make_tensor_value_info("B", TensorProto.FLOAT, [n, n])
C = helper.make_tensor_value_info("C", TensorProto.FLOAT, [n, n])
graph = helper.make_graph([helper.make_node("MatMul", ["A", "B"], ["C"])], "mm", [A, B], [C])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
model.ir_version = min(model.ir_version, 8)

so = ort.SessionOptions()
threads = int(os.environ.get("ORT_THREADS", "0"))
so.intra_op_num_threads = threads
sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
feed = {"A": _timed.int_matrix(np, n, 1, np.float32), "B": _timed.int_matrix(np, n, 2, np.float32)}
out = [None]


def op():
    out[0] = sess.run(None, feed)[0]


_timed.run(op, lambda: out[0].sum(dtype=np.float64), threads or sess.get_session_options().intra_op_num_threads)
