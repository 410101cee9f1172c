from scalerl.compute import ComputeMeter


def test_compute_meter_hand_values():
    m = ComputeMeter(devices=2, n_params=1000)
    m.add_time(1800.0)
    m.add_batch(prompt_tokens=10, completion_tokens=20, trained_tokens=30)
    assert m.device_hours == 1.0  # 1800 s x 2 devices
    assert m.flops == 2 * 1000 * 30 + 6 * 1000 * 30
    assert m.tokens == 20
    m2 = ComputeMeter(devices=1, n_params=1)
    m2.load_state_dict(m.state_dict())
    assert m2.metrics() == m.metrics()
