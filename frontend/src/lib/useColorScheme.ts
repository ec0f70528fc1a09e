/** The reader's colour scheme (`prefers-color-scheme`), followed live. */

import { useSyncExternalStore } from "react";

const QUERY = "(prefers-color-scheme: dark)";

function media(): MediaQueryList | null {
  return typeof window !== "undefined" && typeof window.matchMedia === "function" ? window.matchMedia(QUERY) : null;
}

function subscribe(onChange: () => void): () => void {
  const list = media();
  list?.addEventListener("change", onChange);
  return () => list?.removeEventListener("change", onChange);
}

export function useColorScheme(): "light" | "dark" {
  return useSyncExternalStore(subscribe, () => (media()?.matches ? "dark" : "light"), () => "light");
}
