"""Stand-in for IPython.display (see the package docstring): the names sglang imports."""


class HTML(str):
    """Holds the markup; nothing renders it."""


def display(*objects: object, **kwargs: object) -> None:
    """A server has no notebook front end: print the objects' text."""
    print(*objects)
