/** Search-log rows as the API sends them: live `candidate` events (Trial.to_dict) and stored candidates. */

export function trial(index: number, fields: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    index,
    id: `genome${index}`,
    origin: index === 0 ? "seed:hand-cnn" : "random",
    arch: { kind: "image", stages: [{ block: "plain", depth: 2, width: 32 * (index + 1), kernel: 3 }], downsample: "max_pool", norm: "batch_norm", hidden: 0, dropout: 0.2 },
    hparams: { learning_rate: 0.001, weight_decay: 0.0001, max_shift: 1, label_smoothing: 0, batch_size: 64, optimizer: "adamw" },
    params: 1000 * (index + 1),
    macs: 50000 * (index + 1),
    memory_bytes: 1000000,
    latency_ms: 0.5 + index / 10,
    status: "completed",
    reason: "",
    curve: [0.5, 0.7 + index / 100],
    predicted: 0.8,
    accuracy: 0.7 + index / 100,
    loss: 0.1,
    epochs: 2,
    seconds: 3.5,
    started_at: index / 10,
    worker: "local",
    ...fields,
  };
}

export function stored(index: number, fields: Record<string, unknown> = {}, status = "trained") {
  const t = trial(index, fields);
  return {
    id: `00000000-0000-0000-0000-00000000000${index}`,
    genome: { id: t.id, origin: t.origin, arch: t.arch, hparams: t.hparams },
    metrics: { curve: t.curve, predicted: t.predicted, accuracy: t.accuracy, epochs: t.epochs, loss: t.loss },
    cost: { seconds: t.seconds, params: t.params, macs: t.macs, memory_bytes: t.memory_bytes, latency_ms: t.latency_ms, reason: t.reason, index, worker: "local" },
    status,
  };
}
