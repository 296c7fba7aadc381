# cordon interpreter driver: runs inside the confined worker, one per session.
#
# Protocol (see protocol.rs): frames of a 4-byte big-endian length and UTF-8 JSON. Requests
# arrive on the worker's original fd 0, replies leave on its original fd 1. Both are moved to
# private, non-inheritable descriptors before any user code runs; fd 0 becomes /dev/null and
# fds 1 and 2 become the cell-output files the server passed as fds 3 and 4 (memory files it
# keeps open and empties before each cell), so `print`, `os.write(1, ...)`, C extensions and
# subprocesses all land in the cell's stdout/stderr and never in a frame. Forked children
# close the protocol descriptors at fork and never return into this loop.
#
# The server hands this script over as descriptor 5 and starts it with a one-line bootstrap
# (boot.rs), never in argv. argv[1] is the longest repr to send back. This file is compiled
# into the cordon binary (include_str!).

import ast
import builtins
import io
import json
import os
import signal
import sys
import traceback
import types
import linecache

_PROTO_IN = os.dup(0)  # os.dup makes non-inheritable descriptors (PEP 446)
_PROTO_OUT = os.dup(1)
_MAIN_PID = os.getpid()
_MAX_REPR = int(sys.argv[1]) if len(sys.argv) > 1 else 1 << 20
_MAX_IMAGES = 20
_DRIVER_FILE = sys._getframe().f_code.co_filename
_CELL_PREFIX = "<cell-"


def _close_protocol_in_child():
    # A fork()ed child (os.fork, multiprocessing) must never read requests or write replies.
    for fd in (_PROTO_IN, _PROTO_OUT):
        try:
            os.close(fd)
        except OSError:
            pass


os.register_at_fork(after_in_child=_close_protocol_in_child)


def _redirect_fds():
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for target, passed in ((1, 3), (2, 4)):
        os.dup2(passed, target)
        os.close(passed)


_redirect_fds()


def _text_stream(fd):
    # Unbuffered at the byte level and write-through at the text level, so Python-level and
    # fd-level writes interleave in the order they happened.
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="backslashreplace", write_through=True)


_STDOUT = _text_stream(1)
_STDERR = _text_stream(2)
sys.stdin = open(os.devnull, "r")
sys.stdout = sys.__stdout__ = _STDOUT
sys.stderr = sys.__stderr__ = _STDERR
sys.argv = [""]

# A fresh __main__ for user code, so functions defined in cells pickle as __main__.x.
_user_main = types.ModuleType("__main__")
_user_main.__dict__["__builtins__"] = builtins
sys.modules["__main__"] = _user_main
_NS = _user_main.__dict__

os.environ.setdefault("MPLBACKEND", "Agg")
import warnings  # noqa: E402

warnings.filterwarnings("ignore", message=".*non-GUI backend.*")
warnings.filterwarnings("ignore", message=".*non-interactive.*cannot be shown.*")


def _read_exact(n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(_PROTO_IN, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def _read_frame():
    size = int.from_bytes(_read_exact(4), "big")
    return json.loads(_read_exact(size).decode("utf-8"))


def _write_frame(obj):
    data = json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace")
    data = len(data).to_bytes(4, "big") + data
    view = memoryview(data)
    while view:
        n = os.write(_PROTO_OUT, view)
        view = view[n:]


def _clip(text, limit):
    if len(text) <= limit:
        return text
    half = limit // 2
    return "%s\n[... %d characters omitted ...]\n%s" % (text[:half], len(text) - 2 * half, text[-half:])


def _type_name(exc_type):
    module = getattr(exc_type, "__module__", None)
    name = getattr(exc_type, "__qualname__", exc_type.__name__)
    if module in (None, "builtins", "__main__"):
        return name
    return "%s.%s" % (module, name)


def _user_traceback(tb):
    # Drop the driver's own frames in front of the first cell frame.
    while tb is not None and tb.tb_frame.f_code.co_filename == _DRIVER_FILE:
        tb = tb.tb_next
    return tb


def _describe(exc):
    tb = _user_traceback(exc.__traceback__)
    try:
        lines = traceback.format_exception(type(exc), exc, tb)
    except Exception:  # a broken __str__ must not take the driver down
        lines = traceback.format_exception_only(type(exc), exc)
    try:
        message = str(exc)
    except Exception:
        message = "<unprintable %s>" % type(exc).__name__
    return {
        "type": _type_name(type(exc)),
        "message": _clip(message, 4000),
        "traceback": _clip("".join(lines), 20000),
    }


def _collect_figures():
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return [], None
    images, problem = [], None
    try:
        import base64

        for num in plt.get_fignums()[:_MAX_IMAGES]:
            fig = plt.figure(num)
            buf = io.BytesIO()
            fig.savefig(buf, format="png")
            images.append(base64.b64encode(buf.getvalue()).decode("ascii"))
    except Exception as exc:  # a figure that cannot render is reported, not fatal
        problem = "cordon: could not render a figure: %s: %s\n" % (type(exc).__name__, exc)
    finally:
        try:
            plt.close("all")
        except Exception:
            pass
    return images, problem


def _compile_cell(code, filename):
    tree = ast.parse(code, filename, "exec")
    last = None
    silent = code.rstrip().endswith(";")
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not silent:
        last = ast.Expression(tree.body.pop().value)
    flags = getattr(ast, "PyCF_ALLOW_TOP_LEVEL_AWAIT", 0)
    body = compile(tree, filename, "exec", flags=flags, dont_inherit=True)
    expr = compile(last, filename, "eval", flags=flags, dont_inherit=True) if last else None
    return body, expr


_CO_COROUTINE = 0x80  # inspect.CO_COROUTINE, without importing inspect at startup


def _run_code(code_obj):
    value = eval(code_obj, _NS)
    if code_obj.co_flags & _CO_COROUTINE:
        import asyncio

        value = asyncio.run(value)
    return value


def _run_cell(request):
    counter = request["id"]
    code = request["code"]
    filename = "%s%d>" % (_CELL_PREFIX, counter)
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    sys.stdout, sys.stderr = _STDOUT, _STDERR
    reply = {"id": counter, "result": None, "error": None, "interrupted": False}
    try:
        try:
            signal.signal(signal.SIGINT, signal.default_int_handler)
            body, expr = _compile_cell(code, filename)
            _run_code(body)
            if expr is not None:
                value = _run_code(expr)
                if value is not None:
                    _NS["_"] = value
                    reply["result"] = _clip(repr(value), _MAX_REPR)
        finally:
            # From here on a late SIGINT is dropped: CPython skips pending signals whose
            # handler is SIG_IGN, so a timeout that races the cell's end cannot break a frame.
            signal.signal(signal.SIGINT, signal.SIG_IGN)
    except KeyboardInterrupt as exc:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        reply["interrupted"] = True
        reply["error"] = _describe(exc)
    except BaseException as exc:  # SystemExit included: a cell cannot end the session
        reply["error"] = _describe(exc)
    if os.getpid() != _MAIN_PID:
        # A forked child fell out of the user's code: it has no business here.
        os._exit(0)
    images, problem = _collect_figures()
    if problem:
        _STDERR.write(problem)
    reply["images"] = images
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    return reply


def _main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _write_frame({"ready": True, "pid": _MAIN_PID, "python": sys.version.split()[0]})
    while True:
        try:
            request = _read_frame()
        except EOFError:
            os._exit(0)
        op = request.get("op")
        if op == "run":
            reply = _run_cell(request)
        else:
            reply = {"id": request.get("id"), "error": {"type": "ProtocolError", "message": "unknown op %r" % op, "traceback": ""}}
        _write_frame(reply)


_main()
