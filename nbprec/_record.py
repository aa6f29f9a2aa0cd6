"""Small value classes without code generation: what ``@dataclass(frozen=True)`` gives, at no import cost.

A dataclass writes the source of its ``__init__``, ``__repr__``, ``__eq__``, ``__hash__`` and frozen
``__setattr__`` and compiles it when its class is created: half a millisecond per class, and the comparison's
command line creates a dozen before it reads a byte (6 ms of its start-up), and importing :mod:`dataclasses` costs
7 ms where nothing else has imported :mod:`inspect` (the early worker of ``nbprec compare``, which runs without
numpy). :class:`Record` gives the same
methods once, for every subclass, from the fields its annotations declare::

    class Problem(Record):
        file: str
        problem: str
        record: str = ""

- ``__init__`` takes the fields in order, by position or keyword; a field with a default may be left out, and
  :class:`Factory` makes a fresh default each time (``field(default_factory=...)``);
- ``__repr__`` is ``Problem(file='a', problem='b', record='')``, ``__eq__`` compares the fields of two records
  of the same class, ``__hash__`` hashes them;
- assigning or deleting an attribute raises :class:`FrozenInstanceError` (an ``AttributeError``), unless the
  class says ``frozen=False`` (``class BatchCall(Record, frozen=False)``, which is then unhashable);
- fields a class names in ``uncompared`` (``class GeModel(Record, uncompared=("path",))``) are left out of
  ``__eq__`` and ``__hash__`` (``field(compare=False)``); names that start with ``_`` are not fields (a class
  keeps what it derives from its fields there, set in its own ``__init__``: ``field(init=False)``);
- :func:`replace` and :func:`asdict` stand for :func:`dataclasses.replace` and :func:`dataclasses.asdict`.

Records keep their values in the instance ``__dict__``: they pickle and copy as plain objects do, and
``functools.cached_property`` works on them. A subclass may define any of these methods itself (a faster
``__init__`` for a record made per tensor pair, its own ``__repr__``).
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any, ClassVar, TypeVar

    R = TypeVar("R", bound="Record")


class FrozenInstanceError(AttributeError):
    """An attribute of a frozen :class:`Record` was assigned or deleted."""


class Factory:
    """The default of a field that is made anew for each record (``values: dict = Factory(dict)``)."""

    __slots__ = ("make",)

    def __init__(self, make: Callable[[], Any]) -> None:
        self.make = make

    def __repr__(self) -> str:
        return f"Factory({self.make!r})"


class Record:
    """Base of small value classes: fields from annotations, ``__init__``, ``__repr__``, ``__eq__``, ``__hash__``
    and (unless ``frozen=False``) no assignment after ``__init__``; see :mod:`nbprec._record`."""

    __slots__ = ()
    _fields: ClassVar[tuple[str, ...]] = ()
    _compared: ClassVar[tuple[str, ...]] = ()  # (the fields __eq__ and __hash__ look at)
    _defaults: ClassVar[dict[str, Any]] = {}
    _frozen: ClassVar[bool] = True

    def __init_subclass__(cls, frozen: bool = True, uncompared: tuple[str, ...] = (), **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields, defaults = list(cls._fields), dict(cls._defaults)
        left_out = set(cls._fields) - set(cls._compared) | set(uncompared)  # (a parent's, and this class's)
        # (this class's own annotations, as ``inspect.get_annotations`` gives a class's, without importing inspect:
        # strings, not evaluated)
        own = cls.__dict__.get("__annotations__", {})  # noqa: RUF063
        for name, annotation in own.items():
            if name.startswith("_") or str(annotation).startswith(("ClassVar", "typing.ClassVar")):
                continue
            if name not in fields:
                fields.append(name)
            if name in cls.__dict__:
                defaults[name] = cls.__dict__[name]
            elif defaults and name not in defaults:
                raise TypeError(f"{cls.__name__}: field {name!r} without a default follows one with a default")
        unknown = set(uncompared) - set(fields)
        if unknown:
            raise TypeError(f"{cls.__name__}: uncompared names no field: {', '.join(sorted(unknown))}")
        cls._fields, cls._defaults, cls._frozen = tuple(fields), defaults, frozen
        cls._compared = tuple(name for name in fields if name not in left_out)
        if not frozen and "__hash__" not in cls.__dict__:
            cls.__hash__ = None  # type: ignore[assignment]  # (mutable: as a dataclass with eq and not frozen)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        fields = self._fields
        if len(args) > len(fields):
            raise TypeError(f"{type(self).__name__}() takes {len(fields)} arguments but {len(args)} were given")
        values = self.__dict__
        values.update(zip(fields, args, strict=False))  # (fewer args than fields: the first ones)
        given = len(args)
        if kwargs:
            for name in fields[:given]:
                if name in kwargs:
                    raise TypeError(f"{type(self).__name__}() got multiple values for argument {name!r}")
            for name in fields[given:]:
                if name in kwargs:
                    values[name] = kwargs.pop(name)
                    given += 1
            if kwargs:  # (the fields' were taken out)
                name = next(iter(kwargs))
                raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {name!r}")
        if given < len(fields):  # the defaults of the others
            defaults = self._defaults
            for name in fields[len(args) :]:
                if name in values:
                    continue
                if name not in defaults:
                    raise TypeError(f"{type(self).__name__}() missing required argument: {name!r}")
                default = defaults[name]
                values[name] = default.make() if isinstance(default, Factory) else default

    def _values(self) -> tuple[Any, ...]:
        values = self.__dict__
        return tuple(values[name] for name in self._compared)

    def __repr__(self) -> str:
        values = self.__dict__
        return f"{type(self).__qualname__}({', '.join(f'{n}={values[n]!r}' for n in self._fields)})"

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        return self._values() == other._values()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._values())

    def __setattr__(self, name: str, value: Any) -> None:
        if self._frozen:
            raise FrozenInstanceError(
                f"cannot assign to field {name!r} of a {type(self).__name__}: it is immutable; make a changed copy"
                " with nbprec._record.replace(record, field=value)"
            )
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        if self._frozen:
            raise FrozenInstanceError(f"cannot delete field {name!r} of a {type(self).__name__}")
        object.__delattr__(self, name)


def replace(obj: R, /, **changes: Any) -> R:
    """A new record of the same class as ``obj``, with ``changes`` to some of its fields
    (:func:`dataclasses.replace`)."""
    return type(obj)(**{**{name: obj.__dict__[name] for name in obj._fields}, **changes})


def asdict(obj: Record, /) -> dict[str, Any]:
    """The fields of the record ``obj`` as a dict, records, lists, tuples and dicts in them converted too
    (:func:`dataclasses.asdict`)."""

    def plain(value: Any) -> Any:
        if isinstance(value, Record):
            return {name: plain(value.__dict__[name]) for name in value._fields}
        if isinstance(value, (list, tuple)):
            return type(value)(plain(v) for v in value)
        if isinstance(value, dict):
            return {plain(k): plain(v) for k, v in value.items()}
        return value

    return plain(obj)
