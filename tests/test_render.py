from PIL import Image

from env.benchmark import VALIDATION
from env.instance import read_instances
from env.render import ansi, gif, png


def test_ansi_png_gif(tmp_path):
    instance = read_instances(VALIDATION.path)[40]
    text = ansi(instance)
    rows = text.splitlines()[: instance.size]
    assert len(rows) == instance.size and all(len(r.split()) == instance.size for r in rows)
    assert sum(r.split().count("H") for r in rows) == len(instance.holes)
    end = ansi(instance, instance.solution)
    for i, (r, c) in enumerate(instance.goals):  # at the end of the witness plan every agent is on its goal
        assert end.splitlines()[r].split()[c] == str(i)
    png(instance, instance.solution, tmp_path / "a.png")
    assert Image.open(tmp_path / "a.png").size[0] > 100
    gif(instance, instance.solution, tmp_path / "a.gif")
    frames = Image.open(tmp_path / "a.gif").n_frames
    assert frames == max(len(m) for m in instance.solution) + 1
