"""The model twin: ``compare_torch`` and ``compare_keras`` train your model in the framework and
in fpemu side by side (``from_torch``/``from_keras`` build the fpemu twin), compare every tensor
of every step and explain each difference (``checker``, ``causes``), as two independent runs or
in lockstep; the result is a ``ModelReport``.
"""
