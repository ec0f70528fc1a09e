/** Narrowing helpers for the free-form JSON the API returns (profiles, metrics, reports, events). */

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json };
export type JsonObject = Record<string, unknown>;

export function isObject(value: unknown): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

export function obj(value: unknown): JsonObject {
  return isObject(value) ? value : {};
}

export function num(value: unknown): number | null {
  return typeof value === "number" && Number.isFinite(value) ? value : null;
}

export function str(value: unknown): string | null {
  return typeof value === "string" ? value : null;
}

export function arr(value: unknown): unknown[] {
  return Array.isArray(value) ? value : [];
}

export function numbers(value: unknown): number[] {
  return arr(value).filter((v): v is number => typeof v === "number" && Number.isFinite(v));
}
