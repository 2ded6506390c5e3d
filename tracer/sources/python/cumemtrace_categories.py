"""What tensors are, read from the program's own objects (on by default in `cumemtrace run`).

Once the program has imported torch (never before: importing it here would change the
program), the tracer is told which storages are parameters, buffers, gradients and optimizer
state, through its exported call cumemtrace_tensor_categories. The collector names each
allocation live at such an address for its whole life, and infers the categories of the
others (activations, temporaries, inputs) from where they were born and died
(docs/phases.md, "Categories").

When the objects are read, all without touching the program's control flow:
- every optimizer step (torch's global optimizer step hooks): before it, the parameters of
  its param_groups and their .grad; after it, its state (created by the first step), after
  every step while it changes and at doubling intervals of up to 64 steps while it does not;
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
import array
import atexit
import ctypes
import operator
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
_Tensor = None  # torch.Tensor, once the program imported torch
_nbytes = operator.attrgetter("nbytes")
_grad = operator.attrgetter("grad")
# The array typecode of a uint32_t (cumemtrace_tensor_categories' devices).
_U32 = next(code for code in "IL" if array.array(code).itemsize == 4)
_modules = weakref.WeakSet()
_optimizers = weakref.WeakSet()
# owner (a module or an optimizer) -> {category: addresses last sent}, for what rarely changes
_last_sent = weakref.WeakKeyDictionary()
# optimizer -> [steps until its state is read again, the interval] (_state_due)
_state_schedule = weakref.WeakKeyDictionary()
_MAX_STATE_INTERVAL = 64


def _warn(message):
    sys.stderr.write(f"cumemtrace: categories: {message}\n")


def _storages(tensors):
    """The addresses, bytes and devices of the CUDA tensors' storages, as three lists. Each
    step reads hundreds of tensors (a 48-layer model under Adam: about 500), so torch's C
    methods are mapped over the list rather than called one tensor at a time from Python."""
    Tensor = _Tensor
    devices = list(map(Tensor.get_device, tensors))
    if devices and min(devices) < 0:  # some not on a GPU
        tensors = [t for t, d in zip(tensors, devices) if d >= 0]
        devices = [d for d in devices if d >= 0]
    addresses = _data_pointers(tensors)
    if any(map(Tensor.storage_offset, tensors)):  # a view: its storage's own address
        addresses = [t.untyped_storage().data_ptr() if t.storage_offset() else a
                     for t, a in zip(tensors, addresses)]
    sizes = list(map(_nbytes, tensors))
    if 0 in addresses:  # empty tensors own no memory
        kept = [i for i, a in enumerate(addresses) if a != 0]
        addresses, sizes, devices = ([v[i] for i in kept] for v in (addresses, sizes, devices))
    return addresses, sizes, devices


def _data_pointers(tensors):
    """The tensors' data pointers; 0 for one that has no storage of its own (a sparse
    tensor, a wrapper subclass), whose data_ptr() raises."""
    try:
        return list(map(_Tensor.data_ptr, tensors))
    except RuntimeError:
        return [_data_pointer(t) for t in tensors]


def _data_pointer(tensor):
    try:
        return tensor.data_ptr()
    except RuntimeError:
        return 0


def _send_tensors(category, tensors, owner=None):
    """Sends the CUDA tensors' storages; with `owner`, only when they changed since last time
    (told by the tensors' data pointers, which is cheap: a step's parameters and optimizer
    state are the same tensors as the step before's)."""
    if owner is not None:
        key = tuple(_data_pointers(tensors))
        sent = _last_sent.setdefault(owner, {})
        if sent.get(category) == key:
            return False
        sent[category] = key
    _send_storages(category, *_storages(tensors))
    return True


def _state_due(optimizer):
    """Whether this step's state is read: after every step while it changes, then at
    intervals that double up to _MAX_STATE_INTERVAL steps while it does not. Reading it is
    most of the step hooks' time (three tensors per parameter under Adam), and the collector
    names an allocation for its whole life, so a state tensor made between two reads is still
    named at the next one; only one that dies before it (rare once the state has settled,
    and read at exit if it lives to then) goes unnamed."""
    schedule = _state_schedule.setdefault(optimizer, [0, 1])  # [steps to the read, interval]
    schedule[0] -= 1
    return schedule[0] <= 0


def _state_read(optimizer, changed):
    schedule = _state_schedule[optimizer]
    schedule[1] = 1 if changed else min(2 * schedule[1], _MAX_STATE_INTERVAL)
    schedule[0] = schedule[1]


def _send_storages(category, addresses, sizes, devices, timestamp_ns=0):
    """Sends storages (three lists of the same length), live at timestamp_ns (0: now). The
    arrays are built by array.array in C: ctypes arrays built from Python took half the time
    of a step's reading."""
    if not addresses:
        return
    addresses, sizes, devices = (array.array(code, values) for code, values in
                                 (("Q", addresses), ("Q", sizes), (_U32, devices)))
    _send(category, len(addresses), addresses.buffer_info()[0], sizes.buffer_info()[0],
          devices.buffer_info()[0], timestamp_ns)


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
    if gone:
        _send_storages(WORKSPACE, *map(list, zip(*gone)), timestamp_ns=before_ns)


def _optimizer_parameters(optimizer):
    return [p for group in optimizer.param_groups for p in group["params"]]


def _state_tensors(optimizer):
    Tensor = _Tensor
    return [value for state in optimizer.state.values() for value in state.values()
            if isinstance(value, Tensor)]


def _send_modules():
    for module in list(_modules):
        _send_tensors(PARAMETER, [p for p in module._parameters.values() if p is not None],
                      owner=module)
        _send_tensors(BUFFER, [b for b in module._buffers.values() if b is not None],
                      owner=module)


def _send_optimizer(optimizer, state=True):
    parameters = _optimizer_parameters(optimizer)
    _send_tensors(PARAMETER, parameters, owner=optimizer)
    _send_tensors(GRADIENT, [g for g in map(_grad, parameters) if g is not None])
    if state:
        _send_tensors(OPTIMIZER_STATE, _state_tensors(optimizer), owner=optimizer)


def _before_step(optimizer, args, kwargs):
    """torch's global optimizer step pre-hook."""
    try:
        _optimizers.add(optimizer)
        _send_optimizer(optimizer, state=False)
    except Exception as error:
        _warn(f"optimizer not read: {error}")


def _after_step(optimizer, args, kwargs):
    """torch's global optimizer step post-hook."""
    try:
        if _state_due(optimizer):
            _state_read(optimizer, _send_tensors(OPTIMIZER_STATE, _state_tensors(optimizer),
                                                 owner=optimizer))
    except Exception as error:
        _warn(f"optimizer state not read: {error}")


def _attach(torch):
    global _Tensor
    _Tensor = torch.Tensor
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

    optimizer_hooks.register_optimizer_step_pre_hook(_before_step)
    optimizer_hooks.register_optimizer_step_post_hook(_after_step)

    def at_exit():
        try:
            _last_sent.clear()
            _send_modules()
            for optimizer in list(_optimizers):
                _send_optimizer(optimizer)
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
    """Calls callback(module) once `name` has been imported by the program, whenever: at once
    when it already has been."""
    if name in sys.modules:
        callback(sys.modules[name])
        return
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
    _after_import("torch", _attach)
