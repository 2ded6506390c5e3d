from torch.nn.modules.module import Module, Parameter  # noqa: F401
