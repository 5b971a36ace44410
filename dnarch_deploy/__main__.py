"""`python -m dnarch_deploy`: a short demo of the model library (no data needed)."""

import torch

from . import DNArch, ModelConfig, base_cost, describe, model_cost


def main() -> None:
    torch.manual_seed(0)
    config = ModelConfig(in_channels=1, out_channels=2, input_size=(150,), depth=4, width=32)
    model = DNArch(config)
    x = torch.randn(8, 1, 150)
    print(model)
    print("output:", tuple(model(x).shape))
    cost, target = float(model_cost(model)["total"].detach()), base_cost(config)
    print(f"cost {cost:,.0f} MACs = {cost / target:.3f} x the base CCNN_{{4,32}}")
    print(describe(model).to_json())


if __name__ == "__main__":
    main()
