"""Format results for display."""


def format_result(value, places=6):
    """`value` as text: integers as they are, floats rounded to `places` without trailing zeros."""
    if isinstance(value, int):
        return str(value)
    text = f"{value:.{places}f}".rstrip("0").rstrip(".")
    return text if text not in ("", "-0") else "0"
