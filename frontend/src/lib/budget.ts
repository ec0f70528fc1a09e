/** Job budgets: the named tiers and what they mean, and a budget in words. */

export const TIERS = [
  { value: "low", hours: 2 },
  { value: "medium", hours: 5 },
  { value: "high", hours: 16 },
] as const;

export type Tier = (typeof TIERS)[number]["value"];
export const MIN_BUDGET_SECONDS = 10;
export const MAX_BUDGET_SECONDS = 16 * 3600 * 4;

/** A job's budget as the list shows it: "low · 2 h 00 min" or "custom · 1 min 00 s" (epochs when it has them). */
export function budgetWords(tier: string, seconds: number, epochs: number | null, duration: (s: number) => string): string {
  if (epochs !== null) return `${epochs} epochs`;
  return tier === "custom" ? duration(seconds) : `${tier} · ${duration(seconds)}`;
}
