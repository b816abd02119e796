from setuptools import find_packages, setup

setup(
    name="fairseq-normformer",
    version="0.1.0",
    description="NormFormer (Shleifer, Weston, Ott 2021) as a fairseq plugin",
    packages=find_packages(include=["fairseq_normformer", "fairseq_normformer.*"]),
    python_requires=">=3.10",
    # fairseq itself is installed by scripts/install.sh (ve-fairseq, --no-deps); see docs/install.md.
    install_requires=[],
    extras_require={"fsdp": ["fairscale==0.4.13"]},  # --ddp-backend fully_sharded (requirements/fsdp.txt)
    entry_points={
        "console_scripts": [
            "normformer-build-corpus=fairseq_normformer.cli.build_corpus:main",
            "normformer-convert-fairseq-lm=fairseq_normformer.cli.convert_fairseq_lm:main",
            "normformer-export-hf=fairseq_normformer.cli.export_hf:main",
            "normformer-embed=fairseq_normformer.cli.embed:main",
            "normformer-user-dir=fairseq_normformer.cli.user_dir:main",
            "normformer-analyze=fairseq_normformer.cli.analyze:main",
            "normformer-zero-shot=fairseq_normformer.cli.zero_shot:main",
            "normformer-paper-settings=fairseq_normformer.paper:main",
            "normformer-predict=fairseq_normformer.cli.predict:main",
            "normformer-swag-data=fairseq_normformer.cli.swag_data:main",
            "normformer-consolidate=fairseq_normformer.cli.consolidate:main",
            "normformer-sweep=fairseq_normformer.cli.sweep:main",
        ]
    },
)
