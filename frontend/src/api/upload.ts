/** Uploading a dataset with XMLHttpRequest, whose upload progress events fetch does not offer. */

import { CSRF_HEADER } from "./client";
import { ApiError, problemOf } from "./problem";
import type { Dataset } from "./types";

export interface UploadOptions {
  file: File;
  name?: string;
  resize?: string;
  csrfToken: string | null;
  /** Bytes of the request body sent so far, and its total when known. */
  onProgress?: (loaded: number, total: number | null) => void;
  /** The whole body is sent: the service now validates and profiles the file. */
  onSent?: () => void;
  onUnauthorized?: () => void;
}

export interface Upload {
  done: Promise<Dataset>;
  abort: () => void;
}

/** `POST /api/v1/datasets` as multipart form data (`file`, optional `name` and `resize`). */
export function uploadDataset(options: UploadOptions): Upload {
  const xhr = new XMLHttpRequest();
  const done = new Promise<Dataset>((resolve, reject) => {
    const form = new FormData();
    form.append("file", options.file, options.file.name);
    if (options.name?.trim()) form.append("name", options.name.trim());
    if (options.resize?.trim()) form.append("resize", options.resize.trim());
    xhr.open("POST", "/api/v1/datasets");
    xhr.withCredentials = false; // same origin: the session cookie goes anyway
    xhr.setRequestHeader("Accept", "application/json");
    if (options.csrfToken) xhr.setRequestHeader(CSRF_HEADER, options.csrfToken);
    xhr.upload.onprogress = (event) => {
      options.onProgress?.(event.loaded, event.lengthComputable ? event.total : null);
    };
    xhr.upload.onload = () => options.onSent?.();
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) {
        try {
          resolve(JSON.parse(xhr.responseText) as Dataset);
        } catch {
          reject(new ApiError(xhr.status, { detail: "The service's answer could not be read." }));
        }
        return;
      }
      if (xhr.status === 401) options.onUnauthorized?.();
      reject(problemOf(xhr.status, xhr.responseText, xhr.getResponseHeader("Retry-After")));
    };
    xhr.onerror = () => reject(new TypeError("network error"));
    xhr.onabort = () => reject(new DOMException("The upload was stopped.", "AbortError"));
    xhr.send(form);
  });
  return { done, abort: () => xhr.abort() };
}
