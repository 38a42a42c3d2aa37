"""The reward curve: its PNG and JSON, drawn from verl's logged metrics, continued after a resume."""

import json

from rg_verl.grpo.reward_curve import RewardCurve


def test_reward_curve_png_and_its_values(tmp_path):
    from rg_verl.grpo.reward_curve import main, plot_reward_curve

    png = plot_reward_curve({2: 0.5, 1: 0.25, 3: 0.75}, tmp_path / "sub" / "curve.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in png.parent.iterdir()] == ["curve.png"]  # no temporary file left
    metrics = tmp_path / "metrics.jsonl"
    rows = [{"step": 1, "data": {"critic/score/mean": 0.1}}, {"step": 1, "data": {"x": 1}}, {"step": 2, "data": {}}]
    metrics.write_text("".join(json.dumps(row) + "\n" for row in rows))
    main([str(metrics), str(tmp_path / "cli.png")])
    assert (tmp_path / "cli.png").is_file()


def test_reward_curve_continues_after_a_resume(tmp_path):
    first = RewardCurve(tmp_path / "out", title="p/e: training reward")
    for step, reward in [(1, 0.1), (2, 0.2), (3, 0.3)]:
        first.add(step, reward)
    resumed = RewardCurve(tmp_path / "out")  # a new process, resumed from the checkpoint of step 2
    resumed.add(3, 0.5)
    assert json.loads((tmp_path / "out" / RewardCurve.JSON).read_text()) == {"1": 0.1, "2": 0.2, "3": 0.5}
    assert (tmp_path / "out" / RewardCurve.PNG).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [RewardCurve.JSON, RewardCurve.PNG]


def test_a_reward_curve_that_cannot_be_written_only_warns(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    RewardCurve(blocker / "out").add(1, 0.5)  # must not raise: a plot never stops training
    assert "could not draw the reward curve" in caplog.text
