"""peer_server.py — the server a careful user would otherwise write around PyTorch, as a
baseline for bench_daemon: nn.MultiheadAttention(batch_first=True) fed a (1, T, E) tensor
under eval() and torch.inference_mode() with need_weights=False, which takes PyTorch's fast
path (torch._native_multi_head_attention), behind Python's
ThreadingHTTPServer (--impl stdlib) or FastAPI on uvicorn (--impl fastapi), answering
attnd's single-sequence /v1 request {"query": T×E, "id": ...} with
{"model": ..., "id": ..., "output": T×E} (the id echoed, as attnd does).

Usage: /usr/bin/python3 tests/bench/peer_server.py --impl stdlib|fastapi
           [--model config/demo.safetensors] [--port 0]
Binds 127.0.0.1 (port 0 = any free one), prints "PORT <n>" on stdout once listening, and
serves until killed. Weights are read with tests/fixtures/st_format.py (no safetensors
package). Torch's intra-op threads follow OPENBLAS_NUM_THREADS (default 1, as attnd runs
each batch under load on one OpenBLAS thread); set it the same as attnd's."""
import argparse
import json
import os
import socket
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures"))
import st_format  # noqa: E402


def load_mha(path):
    """nn.MultiheadAttention with the file's PyTorch-named F32 tensors, in eval mode."""
    meta, tensors = st_format.read(path)
    state = {}
    for name, (dtype, shape, raw) in tensors.items():
        if dtype != "F32":
            raise SystemExit("peer_server: %s is %s; only F32 is supported" % (name, dtype))
        state[name] = torch.frombuffer(bytearray(raw), dtype=torch.float32).reshape(shape)
    embed = state["in_proj_weight"].shape[1]
    heads = int(meta.get("num_heads", 8))
    mha = torch.nn.MultiheadAttention(embed, heads, bias="in_proj_bias" in state, batch_first=True)
    mha.load_state_dict(state)
    return mha.eval(), embed


def attend(mha, embed, query):
    """query: T×E nested list -> T×E nested list, or raises ValueError."""
    q = torch.tensor(query, dtype=torch.float32)
    if q.dim() != 2 or q.shape[1] != embed:
        raise ValueError("query must be T x %d" % embed)
    q = q.unsqueeze(0)  # (1, T, E): batched, so the fast path applies
    with torch.inference_mode():
        out, _ = mha(q, q, q, need_weights=False)
    return out[0].tolist()


def listen_socket(port):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", port))
    s.listen(128)
    return s


def serve_stdlib(mha, embed, sock, name):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"  # keep-alive, as attnd-load expects of any server

        def log_message(self, *args):  # no per-request log line
            pass

        def reply(self, status, obj):
            data = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            if self.path not in ("/v1/attention", "/v1/models/%s/attention" % name):
                return self.reply(404, {"error": {"code": "not_found", "message": self.path}})
            try:
                req = json.loads(body)
                out = attend(mha, embed, req["query"])
            except (ValueError, KeyError, TypeError) as e:
                return self.reply(400, {"error": {"code": "invalid_value", "message": str(e)}})
            ans = {"model": name, "output": out}
            if "id" in req:
                ans["id"] = req["id"]
            self.reply(200, ans)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def server_bind(self):  # the socket is bound already
            self.server_address = self.socket.getsockname()
            self.server_name, self.server_port = self.server_address[:2]

    srv = Server(sock.getsockname(), Handler, bind_and_activate=False)
    srv.socket.close()
    srv.socket = sock
    print("PORT %d" % sock.getsockname()[1], flush=True)
    srv.serve_forever()


def serve_fastapi(mha, embed, sock, name):
    from typing import List, Optional

    import uvicorn
    from fastapi import FastAPI, HTTPException
    from pydantic import BaseModel

    class AttentionRequest(BaseModel):
        query: List[List[float]]
        id: Optional[str] = None

    app = FastAPI()

    def run(req):
        try:
            ans = {"model": name, "output": attend(mha, embed, req.query)}
            if req.id is not None:
                ans["id"] = req.id
            return ans
        except ValueError as e:
            raise HTTPException(status_code=400, detail=str(e))

    @app.post("/v1/attention")
    def attention(req: AttentionRequest):
        return run(req)

    @app.post("/v1/models/{model}/attention")
    def model_attention(model: str, req: AttentionRequest):
        if model != name:
            raise HTTPException(status_code=404, detail="model_not_found")
        return run(req)

    config = uvicorn.Config(app, log_level="warning", access_log=False)
    print("PORT %d" % sock.getsockname()[1], flush=True)
    uvicorn.Server(config).run(sockets=[sock])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--impl", choices=("stdlib", "fastapi"), default="stdlib")
    ap.add_argument("--model", default="config/demo.safetensors")
    ap.add_argument("--name", default="demo")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    torch.set_num_threads(int(os.environ.get("OPENBLAS_NUM_THREADS", "1")))
    mha, embed = load_mha(a.model)
    sock = listen_socket(a.port)
    (serve_stdlib if a.impl == "stdlib" else serve_fastapi)(mha, embed, sock, a.name)


if __name__ == "__main__":
    main()
