"""The configured models put together, above `faces/` and `remote/`: the face engine built for a config
(`pipeline`), the checks that each model fits its role and the others (`modelcheck`), and the swapper's
int8 copy built from the user's own weights (`quantize`, also `python -m vcamd.models.quantize`)."""
