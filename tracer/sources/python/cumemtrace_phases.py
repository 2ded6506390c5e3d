"""Phase ranges around functions of an unmodified Python program (`cumemtrace run --phase`).

Each target is PHASE=MODULE:QUALNAME, e.g. settling=ep.trainer:EPTrainer.settle. Calls of
that function open a range named PHASE when they start and close it when they return or
raise, through the tracer's own range calls (recorded like NVTX push/pop on the default
domain). MODULE may also name the script being run (it runs as __main__).

How the functions are found:
- Python 3.12 and later: sys.monitoring reports the first start of every code object once;
  the targets keep their start/return events, every other code object is switched off at
  once, so the program runs at full speed.
- Older Pythons: class methods are wrapped as their class is created (a builtins.__build_class__
  hook) and module functions as their module finishes importing (an import hook). A plain
  function of the __main__ script cannot be reached that way: it gets a warning.
A target's module is resolved when it is imported, at any time: research scripts put their
library on sys.path themselves (sys.path.insert) and import it after start, or import it
lazily inside a function. Nothing is looked up at start (looking up a.b imports package a,
before the program has run a line). A name that was never resolved gets one warning at exit
(module never imported, or function never called), and the program runs on.
"""
import atexit
import ctypes
import os
import sys

_push = None
_pop = None


def _warn(message):
    sys.stderr.write(f"cumemtrace: --phase: {message}\n")


def _range_calls():
    # The tracer is preloaded into this process; its two range calls are global symbols.
    process = ctypes.CDLL(None)
    push = process.cumemtrace_range_push
    push.argtypes = [ctypes.c_char_p]
    push.restype = ctypes.c_int
    pop = process.cumemtrace_range_pop
    pop.argtypes = []
    pop.restype = ctypes.c_int
    return push, pop


def _parse(spec):
    targets = []
    for item in filter(None, (part.strip() for part in spec.split(";"))):
        phase, _, where = item.partition("=")
        module, _, qualname = where.partition(":")
        if not phase or not module or not qualname:
            _warn(f"'{item}' is not PHASE=MODULE:QUALNAME; ignored")
            continue
        targets.append((phase, module, qualname))
    return targets


def _main_module_names():
    """Names the script run as __main__ may be given by: its file's stem, and `-m` module."""
    names = {"__main__"}
    if sys.argv and sys.argv[0] not in ("", "-c", "-m"):
        names.add(os.path.splitext(os.path.basename(sys.argv[0]))[0])
    return names


def install(spec):
    global _push, _pop
    targets = _parse(spec)
    if not targets:
        return
    try:
        _push, _pop = _range_calls()
    except (OSError, AttributeError):
        _warn("the cumemtrace tracer is not loaded in this process; phases not recorded")
        return
    main_names = _main_module_names()
    seen = set()

    def report_unseen():
        for phase, module, qualname in targets:
            if (module, qualname) in seen:
                continue
            if module in main_names or module in sys.modules:
                _warn(f"{phase}={module}:{qualname} was never called (or '{qualname}' is not "
                      f"in {module}); no phase recorded")
            else:
                _warn(f"{phase}={module}:{qualname}: module '{module}' was never imported; "
                      f"no phase recorded")
    atexit.register(report_unseen)

    if sys.version_info >= (3, 12):
        _install_monitoring(targets, main_names, seen)
    else:
        _install_wrappers(targets, main_names, seen)


def _matches(module_name, qualname, targets, main_names):
    for phase, module, wanted in targets:
        if wanted == qualname and (module == module_name or
                                   (module_name == "__main__" and module in main_names)):
            return phase, module, wanted
    return None


def _install_monitoring(targets, main_names, seen):
    mon = sys.monitoring
    tool = next((i for i in range(6) if mon.get_tool(i) is None), None)
    if tool is None:
        _warn("no free sys.monitoring tool id (another tool holds them all); phases not recorded")
        return
    mon.use_tool_id(tool, "cumemtrace")
    events = mon.events
    phase_of_code = {}  # code object -> phase
    open_frames = {}  # id(frame) of a running target -> depth, to pop on return or unwind

    def on_start(code, offset):
        phase = phase_of_code.get(code)
        if phase is None:
            frame = sys._getframe(1)
            match = _matches(frame.f_globals.get("__name__", ""), code.co_qualname, targets,
                             main_names)
            if match is None:
                return mon.DISABLE  # never called for this code object again
            phase = match[0]
            seen.add((match[1], match[2]))
            phase_of_code[code] = phase
            mon.set_local_events(tool, code, events.PY_START | events.PY_RETURN)
        _push(phase.encode())
        frame_id = id(sys._getframe(1))
        open_frames[frame_id] = open_frames.get(frame_id, 0) + 1

    def on_end(code, offset, value):
        if code not in phase_of_code:
            return
        frame_id = id(sys._getframe(1))
        depth = open_frames.get(frame_id, 0)
        if depth == 0:
            return
        if depth == 1:
            del open_frames[frame_id]
        else:
            open_frames[frame_id] = depth - 1
        _pop()

    mon.register_callback(tool, events.PY_START, on_start)
    mon.register_callback(tool, events.PY_RETURN, on_end)
    mon.register_callback(tool, events.PY_UNWIND, on_end)
    # PY_UNWIND is a global-only event: exceptions leaving a target close its range too.
    mon.set_events(tool, events.PY_START | events.PY_UNWIND)


def _wrap(function, phase):
    import functools

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        _push(phase.encode())
        try:
            return function(*args, **kwargs)
        finally:
            _pop()
    return wrapper


def _install_wrappers(targets, main_names, seen):
    import builtins
    import importlib.abc

    def patch(owner, module_name, qualname_prefix):
        for phase, module, qualname in targets:
            if not (module == module_name or (module_name == "__main__" and module in main_names)):
                continue
            head, _, rest = qualname.partition(".")
            if qualname_prefix:
                if head != qualname_prefix or not rest or "." in rest:
                    continue
                attribute = rest
            else:
                if rest:
                    continue
                attribute = head
            function = owner.__dict__.get(attribute) if hasattr(owner, "__dict__") else None
            if function is None:
                continue
            if isinstance(function, (staticmethod, classmethod)):
                wrapped = type(function)(_wrap(function.__func__, phase))
            elif callable(function):
                wrapped = _wrap(function, phase)
            else:
                continue
            setattr(owner, attribute, wrapped)
            seen.add((module, qualname))

    original_build_class = builtins.__build_class__

    def build_class(func, name, *bases, **kwargs):
        cls = original_build_class(func, name, *bases, **kwargs)
        try:
            patch(cls, cls.__module__, name)
        except Exception as error:
            _warn(f"cannot wrap methods of {name}: {error}")
        return cls
    builtins.__build_class__ = build_class

    wanted_modules = {module for _, module, _ in targets}
    for phase, module, qualname in targets:
        if module in main_names and "." not in qualname:
            _warn(f"{phase}={module}:{qualname}: functions of the __main__ script need "
                  f"Python 3.12 or later; ignored")

    class PatchAfterImport(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path, target=None):
            if fullname not in wanted_modules:
                return None
            sys.meta_path.remove(self)
            try:
                import importlib.util
                spec = importlib.util.find_spec(fullname)
            finally:
                sys.meta_path.insert(0, self)
            if spec is None or spec.loader is None:
                return None
            loader = spec.loader
            original_exec = loader.exec_module

            def exec_module(module):
                original_exec(module)
                patch(module, fullname, "")
            loader.exec_module = exec_module
            return spec
    sys.meta_path.insert(0, PatchAfterImport())
