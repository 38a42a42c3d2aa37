"""rg_verl.migrate.cli: a reference config that is not valid YAML is named in one line, ``file:line:column: what is
wrong``, and nothing is written."""

from rg_verl.migrate.cli import main


def test_a_yaml_syntax_error_is_one_line_naming_file_line_and_column(tmp_path, capsys):
    old = tmp_path / "old.yaml"
    old.write_text("reasoning_gym:\n  datasets:\n    chain_sum: {weight: 1\n")
    assert main([str(old), "-o", str(tmp_path / "new.yaml")]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{old}:4:1: expected ',' or '}}', but got '<stream end>' (while parsing a flow mapping that began at 3:16)"
    ]
    assert not (tmp_path / "new.yaml").exists()
