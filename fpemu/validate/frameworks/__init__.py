"""The framework suites: ``validate_torch`` checks fpemu against this machine's PyTorch (and
Keras 3) install section by section (casts, autocast op dtypes, GradScaler and Keras scaler
rules, training steps) into a ``Report``; ``ScalerRecorder``/``check_trace`` check a loss-scale
trace you recorded against a framework's rules.
"""
