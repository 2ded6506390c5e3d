"""Which module each tensor is born in (`cumemtrace run --modules`).

Once the program has imported torch (never before), two global module hooks of torch's own
(a forward pre-hook and a forward hook that runs even when forward raises) keep a stack of
the modules each thread is in, and tell the tracer the innermost one through its exported
call cumemtrace_module_enter: the PyTorch bridge copies it into every tensor born on that
thread. A module's path is found the first time it runs: its name under the module that
called it, through containers that are never called themselves (`transformer.h.3.attn`); a
module called outside any other is a root and is named by its class, `<GPT>`. Paths are
sent once each, through cumemtrace_module_define.

Backward runs no module hook (autograd's threads run no Python): the collector gives a
backward allocation the module of the forward operation it belongs to (docs/design.md,
"Modules and operators").
"""
import ctypes
import threading
import weakref

_enter = None
_define = None
_local = threading.local()
_ids = weakref.WeakKeyDictionary()  # module -> (path id, path)
_paths = {}                          # path -> path id
_paths_lock = threading.Lock()


def _path_of(module, parent, parent_path):
    """The path of `module`, first called while `parent` (at `parent_path`) ran."""
    if parent is None:
        return f"<{type(module).__name__}>"
    # Through containers that are never called themselves: `for block in self.blocks:
    # x = block(x)` calls blocks.0, blocks.1, ...
    name = next((n for n, child in parent.named_modules() if child is module and n), None)
    if name is None:  # called by a module it is not a submodule of
        name = f"<{type(module).__name__}>"
    return name if parent_path.startswith("<") else f"{parent_path}.{name}"


def _id_of(module, stack):
    _, parent_path, parent = stack[-1] if stack else (0, "", None)
    path = _path_of(module, parent, parent_path)
    with _paths_lock:
        path_id = _paths.get(path)
        if path_id is None:
            path_id = len(_paths) + 1
            _paths[path] = path_id
            _define(path_id, path.encode("utf-8", "replace"))
    _ids[module] = (path_id, path)
    return path_id, path


def _pre_hook(module, args):
    stack = getattr(_local, "stack", None)
    if stack is None:
        stack = _local.stack = []
    known = _ids.get(module)
    path_id, path = known if known is not None else _id_of(module, stack)
    # The module itself: it is running, so the stack keeps it alive no longer than that.
    stack.append((path_id, path, module))
    _enter(path_id)


def _post_hook(module, args, output):
    stack = getattr(_local, "stack", None)
    if stack:
        stack.pop()
    _enter(stack[-1][0] if stack else 0)


def _attach(torch):
    hooks = torch.nn.modules.module
    hooks.register_module_forward_pre_hook(_pre_hook)
    try:
        hooks.register_module_forward_hook(_post_hook, always_call=True)
    except TypeError:  # a torch without always_call
        hooks.register_module_forward_hook(_post_hook)


def install():
    global _enter, _define
    try:
        library = ctypes.CDLL(None)
        enter = library.cumemtrace_module_enter
        define = library.cumemtrace_module_define
    except (OSError, AttributeError):
        return  # not traced: nothing to tell
    enter.argtypes = [ctypes.c_uint32]
    enter.restype = ctypes.c_uint32
    define.argtypes = [ctypes.c_uint32, ctypes.c_char_p]
    define.restype = ctypes.c_uint32
    _enter, _define = enter, define
    import cumemtrace_categories
    cumemtrace_categories._after_import("torch", _attach)
