import nbformat, pytest

def test_fail(tmp_path, jupyterlab_factory, open_notebook):
    root = tmp_path / "r"; root.mkdir()
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("1"), nbformat.v4.new_code_cell("raise ValueError('xx')"), nbformat.v4.new_code_cell("2")],
        metadata={"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(nb, str(root / "f.ipynb"))
    lab = jupyterlab_factory(root, {})
    nbp = open_notebook(lab, "f.ipynb")
    nbp.run_all()
    with pytest.raises(AssertionError, match="code cell #2 did not run.*ValueError"):
        nbp.wait_all_ran(timeout=60)
