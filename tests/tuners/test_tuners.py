"""One suite for every tuner, plus what is particular to each and to the search space."""

import math
from collections.abc import Iterator

import pytest

from common.config import Config
from common.errors import ConfigError
from common.tuners import _FACTORIES as FACTORIES
from common.tuners import _PROVIDERS as PROVIDERS
from common.tuners import (
    P3_PARTITION_BYTES,
    BayesianTuner,
    DefaultTuner,
    GridTuner,
    SearchSpace,
    Tuner,
    available,
    create,
    register,
    run_search,
)

KIB, MIB = 1024, 1024 * 1024
SMALL = SearchSpace(partitions=[64 * KIB, 256 * KIB, MIB, 4 * MIB], credit_multiples=[1, 2, 4, 8])
NAMES = ["default", "grid", "bayesian", "meta"]


def smooth(config: Config) -> float:
    """A unimodal speed surface with its peak at 1 MiB, 4x; native runs at 50."""
    if not config.scheduling:
        return 50.0
    x = math.log2(config.partition_bytes / MIB)
    y = math.log2(config.credit_multiple / 4)
    return 100.0 * math.exp(-0.3 * x * x - 0.5 * y * y)


def _create(name: str, **options: object) -> Tuner:
    """A tuner by name; the meta tuner with a fixed predictor (its model is tested apart)."""
    if name == "meta":
        import common.meta  # noqa: F401  (registers the meta tuner)
        from common.testing.meta import FixedPredictor

        options["predictor"] = FixedPredictor(lambda p, c: 1.0)
    return create(name, **options)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
def test_every_tuner_follows_the_contract(name: str) -> None:
    tuner = _create(name, space=SMALL, seed=1)
    assert isinstance(tuner, Tuner) and tuner.name == name
    assert tuner.best is None and tuner.observations == []
    first = tuner.propose()
    assert isinstance(first, Config)
    assert tuner.propose() == first  # stable until something is observed
    tuner.observe(first, 10.0)
    tuner.observe(first, 20.0)
    assert tuner.best == (first, 15.0)  # repeated windows are averaged
    for _ in range(5):
        config = tuner.propose()
        assert config.credit_bytes >= config.partition_bytes
        tuner.observe(config, smooth(config))
    best = tuner.best
    assert best is not None and best[1] == max(s for _, s in tuner.observations)
    tuner.reset()
    assert tuner.best is None and tuner.observations == []


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("speed", [-1.0, math.nan, math.inf, True, "fast"])
def test_bad_speeds_are_rejected(name: str, speed: object) -> None:
    tuner = _create(name, space=SMALL)
    with pytest.raises(ConfigError, match="speed must be"):
        tuner.observe(tuner.propose(), speed)  # type: ignore[arg-type]


@pytest.mark.parametrize("cls", [DefaultTuner, GridTuner, BayesianTuner])
def test_constructors_are_keyword_only_and_validated(cls: type[Tuner]) -> None:
    with pytest.raises(TypeError):
        cls(SMALL)  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="seed must be"):
        cls(space=SMALL, seed=-1)
    with pytest.raises(ConfigError, match="space must be"):
        cls(space=[64 * KIB])  # type: ignore[arg-type]


def test_default_is_p3_and_keeps_the_other_fields() -> None:
    base = Config(window_steps=20, tuner="default")
    config = DefaultTuner(base=base).propose()
    assert config.partition_bytes == config.credit_bytes == P3_PARTITION_BYTES == 160 * KIB
    assert config.window_steps == 20 and config.tuner == "default"


def test_grid_visits_every_point_once_then_keeps_the_best() -> None:
    tuner = GridTuner(space=SMALL)
    seen = []
    for _ in range(len(SMALL) + 1):
        config = tuner.propose()
        seen.append(SearchSpace.point(config) if config.scheduling else "native")
        tuner.observe(config, smooth(config))
    assert seen == ["native", *SMALL]
    assert SearchSpace.point(tuner.propose()) == (MIB, 4)


def test_bayesian_is_deterministic_and_never_repeats_before_exhausting() -> None:
    runs = [run_search(BayesianTuner(space=SMALL, seed=s), smooth, budget=len(SMALL) + 1)
            for s in (3, 3, 4)]
    points = [[SearchSpace.point(c) if c.scheduling else (0, 0) for c, _ in run.history]
              for run in runs]
    assert points[0] == points[1]
    assert points[0] != points[2]
    assert sorted(points[0]) == sorted([(0, 0), *SMALL])  # every point once, native too
    quick = run_search(BayesianTuner(space=SMALL, seed=0), smooth, budget=8)
    assert quick.best[1] >= 0.95 * 100.0  # the peak of a smooth surface in half the space


def test_bayesian_accepts_observations_outside_its_space() -> None:
    tuner = BayesianTuner(space=SMALL, seed=0, initial=1)
    outside = Config(partition_bytes=3 * MIB, credit_bytes=9 * MIB)
    tuner.observe(outside, 50.0)
    tuner.observe(tuner.propose(), 40.0)
    assert tuner.propose() in SMALL
    with pytest.raises(ConfigError, match="initial"):
        BayesianTuner(space=SMALL, initial=0)


def test_search_space_defaults_and_validation() -> None:
    space = SearchSpace()
    assert len(space) == 11 * 16
    assert space.partitions[0] == 64 * KIB and space.partitions[-1] == 64 * MIB
    native, *configs = space.configs()
    assert not native.scheduling and native in space and len(configs) == len(space)
    assert all(c.credit_bytes == c.partition_bytes * round(c.credit_multiple) for c in configs)
    assert all(0.0 <= f <= 1.0 for c in configs for f in space.features(c))
    assert space.features(native)[0] > 1.0  # one pack: past the largest partition
    assert native not in SearchSpace(native=False)
    assert SearchSpace(partitions=["4MiB", 4 * MIB, "1MiB"]).partitions == (MIB, 4 * MIB)
    assert Config(partition_bytes=MIB, credit_bytes=4 * MIB) in space
    assert Config(partition_bytes=MIB, credit_bytes=32 * MIB) not in space
    native_base = Config(scheduling=False, window_steps=7)  # where jobs start
    native, *configs = space.configs(native_base)
    assert not native.scheduling and all(c.scheduling and c.window_steps == 7 for c in configs)


@pytest.mark.parametrize(("kwargs", "needle"), [
    ({"partitions": []}, "at least one size"),
    ({"partitions": [1024]}, "partitions must be between"),
    ({"partitions": ["huge"]}, "partitions must be a number"),
    ({"credit_multiples": [0]}, "credit_multiples must be ints between 1 and 16"),
    ({"credit_multiples": [17]}, "but got 17"),
    ({"credit_multiples": [2.0]}, "credit_multiples"),
    ({"credit_multiples": []}, "at least one multiple"),
])
def test_bad_search_spaces_name_the_value(kwargs: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        SearchSpace(**kwargs)  # type: ignore[arg-type]


@pytest.fixture
def registry() -> Iterator[None]:
    saved = dict(FACTORIES)
    try:
        yield
    finally:
        FACTORIES.clear()
        FACTORIES.update(saved)


def test_create_by_name_and_the_meta_hook(registry: None,
                                         monkeypatch: pytest.MonkeyPatch) -> None:
    assert set(NAMES) <= set(available())
    assert isinstance(create(" Bayesian ", seed=2), BayesianTuner)
    with pytest.raises(ConfigError, match="tuner must be one of"):
        create("random")
    # without a provider that registers it, "meta" is a clear error
    FACTORIES.pop("meta", None)
    monkeypatch.setitem(PROVIDERS, "meta", "common.no_such_meta_module")
    with pytest.raises(ConfigError, match="needs the meta-network"):
        create("meta")

    class Fixed(DefaultTuner):
        name = "meta"

    register("meta", Fixed)
    assert isinstance(create("meta", space=SMALL, seed=0), Fixed)
    with pytest.raises(ConfigError, match="callable"):
        register("x", 3)  # type: ignore[arg-type]


def test_control_plane_builds_tuners_through_create() -> None:
    from common.control import make_tuner

    tuner = make_tuner("grid", seed=0)
    assert isinstance(tuner, GridTuner) and make_tuner("none") is None
