"""A model whose forward refuses to run under any TorchDispatchMode (as some custom operators
and tensor subclasses do): profkit's operator ranges for attribution are one."""


def build(spec):
    import torch
    from torch.utils._python_dispatch import _get_current_dispatch_mode_stack

    class Picky(torch.nn.Module):
        def forward(self, x):
            if _get_current_dispatch_mode_stack():
                raise RuntimeError("Picky cannot run under a dispatch mode")
            return x * 2

    return Picky(), (torch.randn(spec.batch_size, 4),)
