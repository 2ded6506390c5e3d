"""What tensors are, read from the program's own objects (on by default in `cumemtrace run`).

Once the program has imported torch (never before: importing it here would change the
program), the tracer is told which storages are parameters, buffers, gradients and optimizer
state, through its exported call cumemtrace_tensor_categories. The collector names each
allocation live at such an address for its whole life, and infers the categories of the
others (activations, temporaries, inputs) from where they were born and died
(docs/phases.md, "Categories").

When the objects are read, all without touching the program's control flow:
- every optimizer step (torch's global optimizer step hooks): before it, the parameters of
  its param_groups and their .grad; after it, its state (created by the first step);
- the first call of any module (a global forward pre-hook, removed at once, so modules keep
  their fast call path): the parameters and buffers of every module built so far;
- at exit (atexit runs before the interpreter frees anything): all of the above once more,
  so a program that ends after one step has its gradients and state named too; and the
  libraries' workspaces that PyTorch's allocator holds (cuBLAS and cuBLASLt keep one per
  handle and stream): what torch's own call that clears them frees, read from the
  allocator's snapshot before and after, named as of the moment before.
Modules are found as they register parameters and buffers (torch's global registration
hooks), kept in a weak set: no module is kept alive by this file.
Only what changed since the last time is sent, except gradients, which `zero_grad()` lets
go of every step: their storages are new allocations even at the same addresses.
"""
import atexit
import ctypes
import sys
import time
import weakref

# The values of v1::Category (proto/cumemtrace/v1/trace.proto).
PARAMETER = 1
BUFFER = 2
GRADIENT = 3
OPTIMIZER_STATE = 4
WORKSPACE = 9

_send = None
_modules = weakref.WeakSet()
_optimizers = weakref.WeakSet()
# owner (a module or an optimizer) -> {category: addresses last sent}, for what rarely changes
_last_sent = weakref.WeakKeyDictionary()


def _warn(message):
    sys.stderr.write(f"cumemtrace: categories: {message}\n")


def _storage(tensor):
    """(address, bytes, device) of a CUDA tensor's storage, or None."""
    device = tensor.get_device()
    if device < 0:
        return None
    address = tensor.data_ptr()
    if tensor.storage_offset():
        address = tensor.untyped_storage().data_ptr()
    return address, tensor.nbytes, device


def _send_tensors(category, tensors, owner=None):
    """Sends the CUDA tensors' storages; with `owner`, only when they changed since last time."""
    _send_storages(category, [s for s in map(_storage, tensors) if s is not None and s[0] != 0],
                   owner)


def _send_storages(category, storages, owner=None, timestamp_ns=0):
    """Sends (address, bytes, device) triples, live at timestamp_ns (0: now)."""
    if owner is not None:
        addresses = tuple(s[0] for s in storages)
        sent = _last_sent.setdefault(owner, {})
        if sent.get(category) == addresses:
            return
        sent[category] = addresses
    if not storages:
        return
    count = len(storages)
    addresses = (ctypes.c_uint64 * count)(*(s[0] for s in storages))
    sizes = (ctypes.c_uint64 * count)(*(s[1] for s in storages))
    devices = (ctypes.c_uint32 * count)(*(s[2] for s in storages))
    _send(category, count, addresses, sizes, devices, timestamp_ns)


def _active_blocks(torch):
    """{(device, address): size} of every block the allocator has handed out."""
    blocks = {}
    for segment in torch.cuda.memory_snapshot():
        address = segment["address"]
        for block in segment["blocks"]:
            if block["state"] == "active_allocated":
                blocks[(segment["device"], block.get("address", address))] = block["size"]
            address += block["size"]
    return blocks


def _send_workspaces(torch):
    """Names the libraries' workspaces in PyTorch's cache by clearing them (at exit only)."""
    clear = getattr(getattr(torch, "_C", None), "_cuda_clearCublasWorkspaces", None)
    cuda = getattr(torch, "cuda", None)
    if clear is None or cuda is None or not cuda.is_initialized():
        return
    before_ns = time.monotonic_ns()
    before = _active_blocks(torch)
    clear()
    after = _active_blocks(torch)
    gone = [(address, size, device) for (device, address), size in before.items()
            if (device, address) not in after]
    _send_storages(WORKSPACE, gone, timestamp_ns=before_ns)


def _optimizer_parameters(optimizer):
    for group in optimizer.param_groups:
        yield from group["params"]


def _state_tensors(optimizer, torch):
    for state in optimizer.state.values():
        for value in state.values():
            if isinstance(value, torch.Tensor):
                yield value


def _send_modules():
    for module in list(_modules):
        _send_tensors(PARAMETER, [p for p in module._parameters.values() if p is not None],
                      owner=module)
        _send_tensors(BUFFER, [b for b in module._buffers.values() if b is not None],
                      owner=module)


def _send_optimizer(optimizer, torch, state=True):
    parameters = list(_optimizer_parameters(optimizer))
    _send_tensors(PARAMETER, parameters, owner=optimizer)
    _send_tensors(GRADIENT, [p.grad for p in parameters if p.grad is not None])
    if state:
        _send_tensors(OPTIMIZER_STATE, list(_state_tensors(optimizer, torch)), owner=optimizer)


def _attach(torch):
    from torch.nn.modules import module as module_hooks
    from torch.optim import optimizer as optimizer_hooks

    def remember_module(module, name, value):
        _modules.add(module)

    module_hooks.register_module_parameter_registration_hook(remember_module)
    module_hooks.register_module_buffer_registration_hook(remember_module)

    first_call = None

    def on_first_module_call(module, args):
        first_call.remove()
        try:
            _send_modules()
        except Exception as error:  # never the reason the program fails
            _warn(f"modules not read: {error}")

    first_call = module_hooks.register_module_forward_pre_hook(on_first_module_call)

    def before_step(optimizer, args, kwargs):
        try:
            _optimizers.add(optimizer)
            _send_optimizer(optimizer, torch, state=False)
        except Exception as error:
            _warn(f"optimizer not read: {error}")

    def after_step(optimizer, args, kwargs):
        try:
            _send_tensors(OPTIMIZER_STATE, list(_state_tensors(optimizer, torch)),
                          owner=optimizer)
        except Exception as error:
            _warn(f"optimizer state not read: {error}")

    optimizer_hooks.register_optimizer_step_pre_hook(before_step)
    optimizer_hooks.register_optimizer_step_post_hook(after_step)

    def at_exit():
        try:
            _last_sent.clear()
            _send_modules()
            for optimizer in list(_optimizers):
                _send_optimizer(optimizer, torch)
            # A program without an optimizer: its parameters' gradients.
            for module in list(_modules):
                _send_tensors(GRADIENT, [p.grad for p in module._parameters.values()
                                         if p is not None and p.grad is not None])
        except Exception as error:
            _warn(f"objects not read at exit: {error}")
        try:
            _send_workspaces(torch)
        except Exception as error:
            _warn(f"workspaces not read at exit: {error}")

    atexit.register(at_exit)


def _after_import(name, callback):
    """Calls callback(module) once `name` has been imported by the program, whenever."""
    import importlib.abc
    import importlib.util

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname != name:
                return None
            sys.meta_path.remove(self)
            spec = importlib.util.find_spec(fullname)
            if spec is None or spec.loader is None:
                return spec
            loader = spec.loader
            original_exec = loader.exec_module

            def exec_module(module):
                original_exec(module)
                try:
                    callback(module)
                except Exception as error:
                    _warn(f"not attached to {name}: {error}")
            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, Finder())


def install():
    global _send
    try:
        send = ctypes.CDLL(None).cumemtrace_tensor_categories
    except (OSError, AttributeError):
        return  # not traced (a child that dropped LD_PRELOAD, say): nothing to tell
    send.argtypes = [ctypes.c_uint32, ctypes.c_uint32, ctypes.c_void_p, ctypes.c_void_p,
                     ctypes.c_void_p, ctypes.c_uint64]
    send.restype = ctypes.c_uint32
    _send = send
    if "torch" in sys.modules:
        _attach(sys.modules["torch"])
    else:
        _after_import("torch", _attach)
