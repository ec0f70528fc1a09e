import { useEffect } from "react";

/** Sets the document's title to "<page> · netsynth". */
export function useTitle(page: string): void {
  useEffect(() => {
    document.title = page ? `${page} · netsynth` : "netsynth";
  }, [page]);
}
