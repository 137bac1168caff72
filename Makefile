# make demo   set up .venv if needed, then run the whole study on the embedded CPU default
# make test   set up .venv if needed, then the test suite (unit + one end-to-end run)
# make plan   what a study will cost before it runs: cells, server starts, projected GPU time
#             (CONFIG=config/demo.yaml for another config; default config/config.yaml)
# make lint   ruff + snakemake --lint
# make lock   re-resolve requirements/cpu.in into requirements/cpu.txt
# make clean  remove generated data, models, results, reports and logs (keeps the folders)

VENV ?= .venv
BIN := $(VENV)/bin
CORES ?= all
CONFIG ?= config/config.yaml
GENERATED := data/raw data/processed resources results reports logs benchmarks

.PHONY: setup demo test test-unit lint lock clean plan

setup:
	@bash scripts/setup_venv.sh $(VENV)

demo: setup
	@start=$$(date +%s); \
	$(BIN)/snakemake --cores $(CORES) --resources gpu=1 --configfile config/demo.yaml; \
	status=$$?; echo ""; \
	$(BIN)/python -m sdbench.report.timing --wall-s $$(( $$(date +%s) - start )); \
	echo ""; $(BIN)/python -m sdbench.report.decision; \
	echo ""; echo "Reports: $(CURDIR)/reports/index.html"; exit $$status

plan: setup
	@$(BIN)/python -m sdbench.plan.cost --config $(CONFIG) $(if $(GPUS),--gpus $(GPUS)) $(if $(ASSUMPTIONS),--assumptions)

test: setup
	$(BIN)/python -m pytest

test-unit: setup
	$(BIN)/python -m pytest -m "not e2e"

lint: setup
	$(BIN)/ruff check src tests workflow
	$(BIN)/snakemake --lint --configfile config/demo.yaml

lock:
	bash scripts/setup_venv.sh --lock $(VENV)

clean:
	find $(GENERATED) -mindepth 1 ! -name .gitkeep -delete
