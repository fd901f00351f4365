"""The simulator's injected bugs leave nothing behind (tests.simulation.bugs): the restore
puts back the very object the target held, so a bug patching a staticmethod, a classmethod
or an inherited method does not turn it into something else for the rest of the process
(the pytest run that goes on to the next test)."""

from simulation.bugs import BUGS, inject, patch


class Base:
    def inherited(self) -> str:
        return "base"


class Host(Base):
    @staticmethod
    def static(value: int) -> int:
        return value

    @classmethod
    def klass(cls) -> str:
        return cls.__name__

    def plain(self) -> str:
        return "plain"


def _broken(*_args: object) -> str:
    return "bug"


def test_a_patched_staticmethod_classmethod_or_method_is_put_back_as_it_was() -> None:
    before = dict(vars(Host))
    for name in ("static", "klass", "plain"):
        restore = patch(Host, name, _broken)
        assert getattr(Host(), name)() == "bug"
        restore()
        assert vars(Host)[name] is before[name]
    # Still callable as they were declared: on an instance, with no self for the static one.
    assert Host().static(3) == 3 and Host().klass() == "Host" and Host().plain() == "plain"


def test_a_patched_inherited_method_leaves_no_copy_on_the_subclass() -> None:
    restore = patch(Host, "inherited", _broken)
    assert Host().inherited() == "bug"
    restore()
    assert "inherited" not in vars(Host)
    assert Host().inherited() == "base"


def test_every_injected_bug_puts_back_what_its_target_held() -> None:
    for name, (target, attribute, _) in sorted(BUGS.items()):
        before = vars(target)[attribute]
        with inject(name):
            assert vars(target)[attribute] is not before
        assert vars(target)[attribute] is before, name
