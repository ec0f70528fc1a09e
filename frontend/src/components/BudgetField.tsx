/** A job's budget: a tier (low / medium / high with their device-hours, or automatic) or a number of seconds. The
 * input labelled "Budget" takes seconds; typing in it makes the budget custom, picking a tier fills it in. */

import { useId } from "react";
import { MAX_BUDGET_SECONDS, MIN_BUDGET_SECONDS, TIERS } from "../lib/budget";
import type { Tier } from "../lib/budget";
import { formatDuration } from "../lib/format";

export type BudgetChoice = "auto" | Tier | "custom";

export interface BudgetValue {
  choice: BudgetChoice;
  /** The text of the seconds input. */
  seconds: string;
}

export const AUTO_BUDGET: BudgetValue = { choice: "auto", seconds: "" };

/** What `JobCreate.budget` gets: a tier's name, whole seconds, or undefined (automatic); an Error when the seconds
 * are not a whole number in range. */
export function budgetToRequest(value: BudgetValue): "low" | "medium" | "high" | number | undefined {
  if (value.choice === "auto") return undefined;
  if (value.choice !== "custom") return value.choice;
  const seconds = Number(value.seconds.trim());
  if (!value.seconds.trim() || !Number.isInteger(seconds) || seconds < MIN_BUDGET_SECONDS || seconds > MAX_BUDGET_SECONDS) {
    throw new Error(`The budget must be a whole number of seconds from ${MIN_BUDGET_SECONDS} to ${MAX_BUDGET_SECONDS}.`);
  }
  return seconds;
}

export function BudgetField({ value, onChange }: { value: BudgetValue; onChange: (value: BudgetValue) => void }) {
  const id = useId();
  const seconds = Number(value.seconds);
  return (
    <div className="row budget">
      <div className="field">
        <label htmlFor={`${id}-tier`}>Tier</label>
        <select id={`${id}-tier`} value={value.choice}
          onChange={(event) => {
            const choice = event.target.value as BudgetChoice;
            const tier = TIERS.find((t) => t.value === choice);
            onChange({ choice, seconds: tier ? String(tier.hours * 3600) : choice === "auto" ? "" : value.seconds });
          }}>
          <option value="auto">Automatic (from the dataset's size)</option>
          {TIERS.map((tier) => (
            <option key={tier.value} value={tier.value}>
              {tier.value[0]?.toUpperCase()}{tier.value.slice(1)}: {tier.hours} device-hours
            </option>
          ))}
          <option value="custom">Custom (seconds)</option>
        </select>
      </div>
      <div className="field">
        <label htmlFor={`${id}-seconds`}>Budget</label>
        <input id={`${id}-seconds`} type="number" inputMode="numeric" min={MIN_BUDGET_SECONDS} max={MAX_BUDGET_SECONDS}
          step={1} value={value.seconds} placeholder="seconds" aria-describedby={`${id}-hint`}
          onChange={(event) => {
            const text = event.target.value;
            onChange({ choice: text.trim() ? "custom" : "auto", seconds: text });
          }} />
        <p id={`${id}-hint`} className="hint">
          {value.choice === "auto"
            ? "Seconds of device time; empty: the tier the dataset's size calls for (up to 10k samples: low)."
            : value.choice === "custom"
              ? Number.isFinite(seconds) && seconds > 0
                ? `${formatDuration(seconds)} of device time.`
                : "Seconds of device time."
              : `The ${value.choice} tier: ${formatDuration(seconds)} of device time (the service may configure it otherwise).`}
        </p>
      </div>
    </div>
  );
}
